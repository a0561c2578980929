#pragma once
// An activation's backward straight from its codes: the per-group codec's DequantizeQuadsBody, or
// the mixed codec's DequantizeBucketQuadsBody, with this sink turns each quad of dequantized values
// x (or y = f(x), for the activations whose derivative PyTorch takes from the output) into
// gx = grad * f'(x) in registers. One pass that reads the codes and the gradient and writes gx,
// where dequantizing first wrote a Workspace tensor of the values and read it back: two of the
// five f32 passes over the tensor. The same floats as dequantizing followed by the backend's
// pointwise_backward (the same f' of core/cuda/kernels/pointwise.h, the same product). CUDA-free,
// so the host runs it too.
#include <cstdint>

#include "core/activation_id.h"
#include "core/cuda/kernels/float_io.h"
#include "core/cuda/kernels/pointwise.h"
#include "core/hd.h"
#include "core/pointwise_math.h"  // with_activation

namespace packrat {

template <class A, bool FromOutput>
struct ApplyDerivative {
  const float* grad;  // (numel), in the order the codes were taken
  float* gx;          // (numel)
  // The gradient at [at, at + n) into in[0, n).
  PACKRAT_HD void load(int64_t at, int n, float* in) const { load_floats4(grad + at, n, in); }
  // gx at [at, at + n) = in * f'(v).
  PACKRAT_HD void finish(const float* v, const float* in, int n, int64_t at) const {
    float gv[4];
    for (int k = 0; k < 4; ++k) gv[k] = in[k] * cuda::derivative_from_saved<A, FromOutput>(v[k]);
    store_floats4(gv, n, gx + at);
  }
  PACKRAT_HD void operator()(float* v, int n, int64_t at) const {
    float in[4] = {};
    load(at, n, in);
    finish(v, in, n, at);
  }
};

// run(ApplyDerivative<A, FromOutput>{grad, gx}) for the activation `id` (< kNumActivations), from
// its output where from_output and the activation has a derivative from its output: the one
// dispatch of every codec's fused backward, on the host and in the CUDA launchers.
template <class Run>
void with_apply_derivative(ActivationId id, bool from_output, const float* grad, float* gx, Run&& run) {
  with_activation(id, [&](auto a) {
    using A = decltype(a);
    if constexpr (A::kFromOutput) {
      if (from_output) return run(ApplyDerivative<A, true>{grad, gx});
    }
    run(ApplyDerivative<A, false>{grad, gx});
  });
}

}  // namespace packrat
