#pragma once
// OpenMP glue: parallel loops over an index range.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include <omp.h>

namespace packrat {

// Below this many elements of work a loop runs on the calling thread: an OpenMP region (a fork
// and a barrier) costs more than it saves on tiny tensors (EfficientNet's (N, C, 1, 1)
// squeeze-excitation operands, batchnorm statistics), and far more on an oversubscribed machine,
// where the barrier waits for a descheduled thread. The one threshold of the CPU kernels and the
// quantizers; their grains are derived from it.
constexpr int64_t kMinParallelWork = 1 << 15;

// Calls fn(i) for i in [begin, end), split across the OpenMP threads.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, Fn&& fn) {
#pragma omp parallel for schedule(static)
  for (int64_t i = begin; i < end; ++i) fn(i);
}

// Calls fn(chunk_begin, chunk_end) over contiguous chunks of at least `grain` elements,
// one chunk per thread: the shape that vectorises elementwise loops.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t grain, Fn&& fn) {
  const int threads = omp_get_max_threads();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, (n + grain - 1) / grain));
  if (chunks == 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    fn(b, e);
  }
}

// Calls fn(r) for r in [0, ranges), each once: thread t first walks its own contiguous block of
// the ranges in order (the t-th of omp_get_max_threads(), where parallel_for's static split put
// the producing kernel's writes, so its reads hit its own core's cache), then helps with the
// others' blocks from where their owners have got to. Dynamic scheduling alone handed ranges to
// whichever thread asked, half of them in the other core's cache; a static split alone leaves a
// descheduled thread's whole share waiting on a machine shared with other jobs.
template <typename Fn>
void parallel_ranges_local_first(int64_t ranges, Fn&& fn) {
  const int threads = omp_get_max_threads();
  if (ranges <= 1 || threads == 1) {
    for (int64_t r = 0; r < ranges; ++r) fn(r);
    return;
  }
  // next[b]: block b's first range not yet taken (block b: [ranges * b / threads, ranges * (b + 1) / threads))
  const auto next = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(threads));
  for (int b = 0; b < threads; ++b) next[b].store(ranges * b / threads, std::memory_order_relaxed);
#pragma omp parallel num_threads(threads)
  {
    // Every thread visits every block, so a region given fewer threads than asked still does all.
    const int t = omp_get_thread_num();
    for (int k = 0; k < threads; ++k) {
      const int b = (t + k) % threads;
      const int64_t end = ranges * (b + 1) / threads;
      for (int64_t r; (r = next[b].fetch_add(1, std::memory_order_relaxed)) < end;) fn(r);
    }
  }
}

// fn(i) for i in [0, n); parallel only when n * work_per_item reaches kMinParallelWork.
template <typename Fn>
void rows_for(int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n * work_per_item < kMinParallelWork) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    parallel_for(0, n, fn);
  }
}

inline void set_num_threads(int n) { omp_set_num_threads(n); }
inline int num_threads() { return omp_get_max_threads(); }

}  // namespace packrat
