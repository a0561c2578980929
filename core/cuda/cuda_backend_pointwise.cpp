// CudaBackend: pointwise activations by id (kernels: pointwise_kernels.cu). Outputs are like
// their input: the bodies run over the buffers as they lie, so any layout is kept.
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/pointwise_kernels.h"
#include "core/pointwise_math.h"

namespace packrat::cuda {

namespace {

// The activation's name for messages, after checking the id and, for from_output, that f' can be
// computed from y (the CPU backend's messages).
std::string_view checked_activation(ActivationId id, bool from_output) {
  const std::string_view name = activation_name(id);
  PACKRAT_CHECK(static_cast<int>(id) < kNumActivations, "activation: unknown id {}", static_cast<int>(id));
  PACKRAT_CHECK(!from_output || derivative_from_output_exists(id), "{}: f' cannot be computed from the output", name);
  return name;
}

}  // namespace

Tensor CudaBackend::pointwise_forward(ActivationId id, const Tensor& x) {
  const std::string_view name = checked_activation(id, false);
  x.check_dtype(DType::f32, name.data());
  Tensor y = Tensor::empty_like(x);
  launch_pointwise_forward(id, x.device_data<float>(), y.device_data<float>(), x.numel());
  PACKRAT_CHECK_LAUNCH("pointwise_forward");
  return y;
}

Tensor CudaBackend::pointwise_derivative(ActivationId id, const Tensor& saved, bool from_output) {
  const std::string_view name = checked_activation(id, from_output);
  saved.check_dtype(DType::f32, name.data());
  Tensor d = Tensor::empty_like(saved);
  launch_pointwise_derivative(id, saved.device_data<float>(), d.device_data<float>(), saved.numel(), from_output);
  PACKRAT_CHECK_LAUNCH("pointwise_derivative");
  return d;
}

Tensor CudaBackend::pointwise_backward(ActivationId id, const Tensor& saved, const Tensor& grad, bool from_output) {
  const std::string_view name = checked_activation(id, from_output);
  saved.check_dtype(DType::f32, name.data());
  grad.check_dtype(DType::f32, name.data());
  PACKRAT_CHECK(saved.numel() == grad.numel() && saved.layout() == grad.layout(),
                "{} backward: gradient {} does not match the saved tensor {}", name, grad.describe(), saved.describe());
  Tensor gx = Tensor::empty_like(grad);
  launch_pointwise_backward(id, saved.device_data<float>(), grad.device_data<float>(), gx.device_data<float>(),
                            grad.numel(), from_output);
  PACKRAT_CHECK_LAUNCH("pointwise_backward");
  return gx;
}

}  // namespace packrat::cuda
