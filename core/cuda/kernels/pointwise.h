#pragma once
// Per-index bodies of the CUDA pointwise section (activations): PACKRAT_HD functors over raw
// buffers, CUDA-free so that the host tests run them (tests/core/cuda_kernels_pointwise_test.cpp).
// A is an Activation<id> of core/pointwise_math.h, the math the CPU loops run too.
#include <cstdint>

#include "core/cuda/kernels/float_io.h"
#include "core/hd.h"
#include "core/pointwise_math.h"

namespace packrat::cuda {

// f'(x) from the saved x, or from the saved y = f(x) when FromOutput (A::kFromOutput only).
template <class A, bool FromOutput>
PACKRAT_HD inline float derivative_from_saved(float saved) {
  if constexpr (FromOutput) {
    return A::df_from_output(saved);
  } else {
    return A::df(saved);
  }
}

// y = f(x) for quad q (core/cuda/kernels/float_io.h) of n elements.
template <class A>
struct PointwiseForwardBody {
  const float* x;
  float* y;
  int64_t n;
  PACKRAT_HD void operator()(int64_t q) const {
    const int m = quad_len(q, n);
    float v[4] = {};
    load_floats4(x + 4 * q, m, v);
    for (int k = 0; k < 4; ++k) v[k] = A::f(v[k]);
    store_floats4(v, m, y + 4 * q);
  }
};

// d = f'(saved).
template <class A, bool FromOutput>
struct PointwiseDerivativeBody {
  const float* saved;
  float* d;
  PACKRAT_HD void operator()(int64_t i) const { d[i] = derivative_from_saved<A, FromOutput>(saved[i]); }
};

// gx = grad * f'(saved), f' never stored, for quad q of n elements.
template <class A, bool FromOutput>
struct PointwiseBackwardBody {
  const float* saved;
  const float* grad;
  float* gx;
  int64_t n;
  PACKRAT_HD void operator()(int64_t q) const {
    const int m = quad_len(q, n);
    float s[4] = {}, g[4] = {};
    load_floats4(saved + 4 * q, m, s);
    load_floats4(grad + 4 * q, m, g);
    for (int k = 0; k < 4; ++k) g[k] *= derivative_from_saved<A, FromOutput>(s[k]);
    store_floats4(g, m, gx + 4 * q);
  }
};

}  // namespace packrat::cuda
