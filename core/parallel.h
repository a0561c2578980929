#pragma once
// OpenMP glue: parallel loops over an index range.
#include <algorithm>
#include <cstdint>

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
