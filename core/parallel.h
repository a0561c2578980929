#pragma once
// OpenMP glue: parallel loops over an index range.
#include <algorithm>
#include <cstdint>

#include <omp.h>

namespace packrat {

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

inline void set_num_threads(int n) { omp_set_num_threads(n); }
inline int num_threads() { return omp_get_max_threads(); }

}  // namespace packrat
