#pragma once
// Per-index bodies of the CUDA optimizer section: one fused pass of SGD (with or without
// momentum) or AdamW over param, grad and the state, the per-element step core/optim_math.h's (the
// CPU's too). CUDA-free, host-tested against the CPU backend (tests/core/cuda_kernels_optim_test.cpp).
#include <cstdint>

#include "core/hd.h"
#include "core/optim_math.h"

namespace packrat::cuda {

struct SgdBody {
  float* p;
  const float* g;
  float lr, weight_decay;
  PACKRAT_HD void operator()(int64_t i) const { p[i] = sgd_step(p[i], g[i], lr, weight_decay); }
};

struct SgdMomentumBody {
  float* p;
  const float* g;
  float* buf;
  float lr, weight_decay, momentum, damp;  // damp = 1 - dampening
  bool nesterov, first;
  PACKRAT_HD void operator()(int64_t i) const {
    float pi = p[i], bi = buf[i];
    sgd_momentum_step(pi, g[i], bi, lr, weight_decay, momentum, damp, nesterov, first);
    p[i] = pi;
    buf[i] = bi;
  }
};

// SGD over many tensors in one launch (a multi-tensor apply, as PyTorch's fused SGD; one launch
// a tensor was 62 launches a ResNet-18 step): a table of up to kSgdTableTensors tensors travels as
// the kernel's argument (under the 4 KiB every CUDA version takes), block b of the grid steps chunk
// b - first_block[k] of tensor k, the tensor whose chunks hold b.
struct SgdTensor {
  float* p;
  const float* g;
  float* buf;  // null: SGD without momentum
  int64_t n;
  bool first;  // the momentum buffer's first step
};
constexpr int kSgdTableTensors = 40;
constexpr int64_t kSgdChunk = 4096;  // elements a block
struct SgdTable {
  SgdTensor tensors[kSgdTableTensors];
  int64_t first_block[kSgdTableTensors + 1];  // prefix sums of ceil(n / kSgdChunk): blocks = first_block[count]
  int count;
};

// Fills `table` with tensors[0, count) up to its capacity; returns how many it took.
inline int fill_sgd_table(SgdTable& table, const SgdTensor* tensors, int count) {
  table.count = count < kSgdTableTensors ? count : kSgdTableTensors;
  table.first_block[0] = 0;
  for (int k = 0; k < table.count; ++k) {
    table.tensors[k] = tensors[k];
    table.first_block[k + 1] = table.first_block[k] + (tensors[k].n + kSgdChunk - 1) / kSgdChunk;
  }
  return table.count;
}

struct SgdManyBody {
  SgdTable table;
  float lr, weight_decay, momentum, damp;  // damp = 1 - dampening
  bool nesterov;
  // The tensor of block b: the last k with first_block[k] <= b (an empty tensor owns no block).
  PACKRAT_HD int tensor_of(int64_t b) const {
    int lo = 0, hi = table.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (table.first_block[mid] <= b) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
  // Thread `thread` of `threads` in block b: its elements of the block's chunk.
  PACKRAT_HD void block(int64_t b, int thread, int threads) const {
    const int k = tensor_of(b);
    const SgdTensor& t = table.tensors[k];
    const int64_t begin = (b - table.first_block[k]) * kSgdChunk;
    const int64_t end = begin + kSgdChunk < t.n ? begin + kSgdChunk : t.n;
    for (int64_t i = begin + thread; i < end; i += threads) {
      if (!t.buf) {
        t.p[i] = sgd_step(t.p[i], t.g[i], lr, weight_decay);
        continue;
      }
      float pi = t.p[i], bi = t.buf[i];
      sgd_momentum_step(pi, t.g[i], bi, lr, weight_decay, momentum, damp, nesterov, t.first);
      t.p[i] = pi;
      t.buf[i] = bi;
    }
  }
};

struct AdamWBody {
  float* p;
  const float* g;
  float* m;
  float* v;
  float decay, beta1, beta2, step_size, bc2_sqrt, eps;
  PACKRAT_HD void operator()(int64_t i) const {
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_step(pi, g[i], mi, vi, decay, beta1, beta2, step_size, bc2_sqrt, eps);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
};

}  // namespace packrat::cuda
