#pragma once
// Launchers of the CUDA pointwise section (pointwise_kernels.cu): activations f, f' and the
// fused grad * f' over f32 buffers of n elements. CUDA- and fmt-free, so that the g++-compiled
// CudaBackend calls them; the caller checks the launch (PACKRAT_CHECK_LAUNCH).
#include <cstdint>

#include "core/activation_id.h"

namespace packrat::cuda {

// y = f(x).
void launch_pointwise_forward(ActivationId id, const float* x, float* y, int64_t n);
// d = f'(x) from the saved x, or from the saved y = f(x) when from_output (the caller checked
// that id offers it: derivative_from_output_exists).
void launch_pointwise_derivative(ActivationId id, const float* saved, float* d, int64_t n, bool from_output);
// gx = grad * f'(saved).
void launch_pointwise_backward(ActivationId id, const float* saved, const float* grad, float* gx, int64_t n,
                               bool from_output);

}  // namespace packrat::cuda
