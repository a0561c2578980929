#pragma once
// An activation's backward straight from its per-group codes: DequantizeQuadsBody with this sink
// turns each quad of dequantized values x (or y = f(x), for the activations whose derivative
// PyTorch takes from the output) into gx = grad * f'(x) in registers. One pass that reads the codes
// and the gradient and writes gx, where dequantizing first wrote a Workspace tensor of the values
// and read it back: two of the five f32 passes over the tensor. The same floats as
// dequantize_groups followed by the backend's pointwise_backward (the same f' of
// core/cuda/kernels/pointwise.h, the same product). CUDA-free, so the host runs it too.
#include <cstdint>

#include "core/cuda/kernels/float_io.h"
#include "core/cuda/kernels/pointwise.h"
#include "core/hd.h"

namespace packrat {

template <class A, bool FromOutput>
struct ApplyDerivative {
  const float* grad;  // (g.numel), in the order the codes were taken
  float* gx;          // (g.numel)
  PACKRAT_HD void operator()(float* v, int n, int64_t at) const {
    float gv[4] = {};
    load_floats4(grad + at, n, gv);
    for (int k = 0; k < 4; ++k) gv[k] *= cuda::derivative_from_saved<A, FromOutput>(v[k]);
    store_floats4(gv, n, gx + at);
  }
};

}  // namespace packrat
