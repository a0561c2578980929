#pragma once
// The CUDA embedding kernels' per-index bodies (core/backend.h: embedding_forward / _backward).
// CUDA-free, so the host tests run these very bodies.
#include <cstdint>

#include "core/cuda/kernels/rows.h"  // record_first_bad
#include "core/hd.h"

namespace packrat::cuda {

// y[k, j] = weight[ids[k], j]; index i = (k, j) over count x cols, cols = max(D, 1) so that every id
// is checked even when D is 0. A bad id records its position k in `bad` (the host throws the
// contract's error) and writes zeros instead of reading outside weight.
struct EmbeddingGather {
  const float* weight;      // (num, D)
  const int64_t* ids;       // (count)
  float* y;                 // (count, D)
  unsigned long long* bad;  // (1): the first position with a bad id
  int64_t num, D, cols;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t k = i / cols, j = i % cols;
    const int64_t id = ids[k];
    if (id < 0 || id >= num) {
      if (j == 0) record_first_bad(bad, k);
      if (j < D) y[k * D + j] = 0.0f;
      return;
    }
    if (j < D) y[k * D + j] = weight[id * D + j];
  }
};

// p[i] = i: the positions that the sort carries along with the ids.
struct Iota {
  int64_t* p;
  PACKRAT_HD void operator()(int64_t i) const { p[i] = i; }
};

// The weight gradient from the ids sorted stably (sorted_ids) and their original positions
// (order): index i = (k, j). The first k of each run of equal ids sums the run's gradient rows for
// column j, in increasing position: the CPU's order, so the sums are bit-identical and
// deterministic. Rows of weight that no id names are left as they are (zeroed beforehand).
struct EmbeddingSegmentSum {
  const int64_t* sorted_ids;  // (count)
  const int64_t* order;       // (count): positions into grad
  const float* grad;          // (count, D)
  float* dweight;             // (num, D)
  int64_t count, D;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t k = i / D, j = i % D;
    const int64_t id = sorted_ids[k];
    if (k > 0 && sorted_ids[k - 1] == id) return;  // not the first of its run
    float acc = 0.0f;
    for (int64_t e = k; e < count && sorted_ids[e] == id; ++e) acc += grad[order[e] * D + j];
    dweight[id * D + j] = acc;
  }
};

}  // namespace packrat::cuda
