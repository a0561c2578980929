// parallel_ranges_local_first: every range once, whatever the threads; and each thread starts on
// its own block, where parallel_for's static split put the producing kernel's writes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

#include <omp.h>

#include "core/parallel.h"

namespace packrat {
namespace {

// Runs `ranges` ranges on `threads` threads: which thread ran each (-1: none; -2: more than once).
std::vector<int> who_ran(int64_t ranges, int threads) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(ranges));
  for (auto& r : ran) r.store(-1);
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  parallel_ranges_local_first(ranges, [&](int64_t r) {
    int expected = -1;
    if (!ran[static_cast<size_t>(r)].compare_exchange_strong(expected, omp_get_thread_num()))
      ran[static_cast<size_t>(r)].store(-2);
  });
  omp_set_num_threads(before);
  return {ran.begin(), ran.end()};
}

TEST(ParallelRanges, RunsEveryRangeOnceWhateverTheThreads) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t ranges : {0, 1, 2, 3, 7, 64, 1001}) {
      const std::vector<int> ran = who_ran(ranges, threads);
      for (int64_t r = 0; r < ranges; ++r)
        ASSERT_GE(ran[static_cast<size_t>(r)], 0) << "range " << r << " of " << ranges << " on " << threads << " threads";
    }
}

TEST(ParallelRanges, ARegionGivenOneThreadStillRunsEveryBlock) {
  // Nested inside a parallel region (nesting off), the inner region has one thread, not the
  // omp_get_max_threads() blocks were cut for.
  const int before = omp_get_max_threads();
  omp_set_num_threads(4);
  std::vector<std::atomic<int>> count(100);
  for (auto& c : count) c.store(0);
#pragma omp parallel num_threads(1)
  parallel_ranges_local_first(100, [&](int64_t r) { count[static_cast<size_t>(r)]++; });
  omp_set_num_threads(before);
  for (size_t r = 0; r < count.size(); ++r) EXPECT_EQ(count[r].load(), 1) << "range " << r;
}

TEST(ParallelRanges, EachThreadStartsOnItsOwnBlock) {
  // Each thread's first call waits until every thread has made its first call, so no thread can
  // finish its own block and take another's first range before that block's owner has. (A
  // timeout keeps a region given fewer threads from hanging; then the test fails.)
  constexpr int kThreads = 2;
  constexpr int64_t kRanges = 10;
  const int before = omp_get_max_threads();
  omp_set_num_threads(kThreads);
  static int run = 0;  // this test's runs (--gtest_repeat): the region's threads are reused
  ++run;
  std::atomic<int> arrived{0};
  std::vector<std::atomic<int>> ran(kRanges);
  parallel_ranges_local_first(kRanges, [&](int64_t r) {
    ran[static_cast<size_t>(r)].store(omp_get_thread_num());
    thread_local int seen = 0;  // the last run this thread made a call in
    if (seen != run) {          // this thread's first call of this run
      seen = run;
      arrived++;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived.load() < kThreads && std::chrono::steady_clock::now() < until) {
      }
    }
  });
  omp_set_num_threads(before);
  ASSERT_EQ(arrived.load(), kThreads) << "the region ran on fewer threads than asked";
  EXPECT_EQ(ran[0].load(), 0) << "thread 0's block starts at range 0";
  EXPECT_EQ(ran[kRanges / 2].load(), 1) << "thread 1's block starts at range " << kRanges / 2;
}

}  // namespace
}  // namespace packrat
