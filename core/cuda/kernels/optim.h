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
