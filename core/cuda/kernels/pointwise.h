#pragma once
// Per-index bodies of the CUDA pointwise section (activations): PACKRAT_HD functors over raw
// buffers, CUDA-free so that the host tests run them (tests/core/cuda_kernels_pointwise_test.cpp).
// A is an Activation<id> of core/pointwise_math.h, the math the CPU loops run too.
#include <cstdint>

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

// y = f(x).
template <class A>
struct PointwiseForwardBody {
  const float* x;
  float* y;
  PACKRAT_HD void operator()(int64_t i) const { y[i] = A::f(x[i]); }
};

// d = f'(saved).
template <class A, bool FromOutput>
struct PointwiseDerivativeBody {
  const float* saved;
  float* d;
  PACKRAT_HD void operator()(int64_t i) const { d[i] = derivative_from_saved<A, FromOutput>(saved[i]); }
};

// gx = grad * f'(saved), f' never stored.
template <class A, bool FromOutput>
struct PointwiseBackwardBody {
  const float* saved;
  const float* grad;
  float* gx;
  PACKRAT_HD void operator()(int64_t i) const { gx[i] = grad[i] * derivative_from_saved<A, FromOutput>(saved[i]); }
};

}  // namespace packrat::cuda
