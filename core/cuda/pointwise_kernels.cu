// The CUDA pointwise section's kernels: one grid-stride kernel per activation and direction,
// over the bodies of kernels/pointwise.h (the math: core/pointwise_math.h, shared with the CPU).
#include "core/cuda/pointwise_kernels.h"

#include "core/cuda/kernels/pointwise.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

void launch_pointwise_forward(ActivationId id, const float* x, float* y, int64_t n) {
  with_activation(id, [&](auto a) {
    using A = decltype(a);
    launch_for_each(quads_of(n), PointwiseForwardBody<A>{x, y, n});
  });
}

void launch_pointwise_derivative(ActivationId id, const float* saved, float* d, int64_t n, bool from_output) {
  with_activation(id, [&](auto a) {
    using A = decltype(a);
    if constexpr (A::kFromOutput) {
      if (from_output) return launch_for_each(n, PointwiseDerivativeBody<A, true>{saved, d});
    }
    launch_for_each(n, PointwiseDerivativeBody<A, false>{saved, d});
  });
}

void launch_pointwise_backward(ActivationId id, const float* saved, const float* grad, float* gx, int64_t n,
                               bool from_output) {
  with_activation(id, [&](auto a) {
    using A = decltype(a);
    if constexpr (A::kFromOutput) {
      if (from_output) return launch_for_each(quads_of(n), PointwiseBackwardBody<A, true>{saved, grad, gx, n});
    }
    launch_for_each(quads_of(n), PointwiseBackwardBody<A, false>{saved, grad, gx, n});
  });
}

}  // namespace packrat::cuda
