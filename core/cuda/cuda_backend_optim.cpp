// CudaBackend: fused optimizer updates, one pass over param, grad and the state (kernels:
// optim_kernels.cu; the step: core/optim_math.h, the CPU's too).
#include <vector>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_handles.h"
#include "core/cuda/optim_kernels.h"

namespace packrat::cuda {

namespace {
// Every operand f32, of the parameter's numel and layout (the kernels run over the buffers as they lie).
void check_operands(const char* op, const Tensor& param, std::initializer_list<const Tensor*> others) {
  param.check_dtype(DType::f32, op);
  for (const Tensor* t : others) {
    t->check_dtype(DType::f32, op);
    PACKRAT_CHECK(t->numel() == param.numel() && t->layout() == param.layout(), "{}: {} does not match parameter {}",
                  op_where(op), t->describe(), param.describe());
  }
}
// An SGD step's operands: grad, and the momentum buffer when there is one (null: none).
void check_sgd_operands(const char* op, const Tensor& param, const Tensor& grad, const Tensor* momentum_buffer) {
  if (momentum_buffer) {
    check_operands(op, param, {&grad, momentum_buffer});
  } else {
    check_operands(op, param, {&grad});
  }
}
}  // namespace

void CudaBackend::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) {
  check_sgd_operands("sgd_update", param, grad, momentum_buffer.defined() ? &momentum_buffer : nullptr);
  float* buf = momentum_buffer.defined() ? momentum_buffer.device_data<float>() : nullptr;
  launch_sgd_update(param.device_data<float>(), grad.device_data<float>(), buf, param.numel(), s.lr, s.weight_decay,
                    s.momentum, 1.0f - s.dampening, s.nesterov, s.first);
  PACKRAT_CHECK_LAUNCH("sgd_update");
  if (momentum_buffer.defined()) momentum_buffer.bump_version();
}

void CudaBackend::sgd_update_many(std::span<const SgdOperands> operands, const SgdStep& s) {
  make_current(index_);
  std::vector<SgdTensor> tensors;  // the kernels' table rows, in the parameters' order
  tensors.reserve(operands.size());
  for (const SgdOperands& o : operands) {
    check_sgd_operands("sgd_update_many", *o.param, *o.grad, o.momentum_buffer);
    PACKRAT_CHECK(o.param->device() == device() && o.grad->device() == device(),
                  "{}: parameter {} and gradient {} must be on {}", op_where("sgd_update_many"),
                  o.param->describe(), o.grad->describe(), device().str());
    tensors.push_back({o.param->device_data<float>(), o.grad->device_data<float>(),
                       o.momentum_buffer ? o.momentum_buffer->device_data<float>() : nullptr, o.param->numel(),
                       o.first});
  }
  launch_sgd_update_many(tensors.data(), static_cast<int>(tensors.size()), s.lr, s.weight_decay, s.momentum,
                         1.0f - s.dampening, s.nesterov);
  PACKRAT_CHECK_LAUNCH("sgd_update_many");
  for (const SgdOperands& o : operands)
    if (o.momentum_buffer) o.momentum_buffer->bump_version();
}

void CudaBackend::adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) {
  check_operands("adamw_update", param, {&grad, &m, &v});
  launch_adamw_update(param.device_data<float>(), grad.device_data<float>(), m.device_data<float>(),
                      v.device_data<float>(), param.numel(), s.decay, s.beta1, s.beta2, s.step_size, s.bc2_sqrt, s.eps);
  PACKRAT_CHECK_LAUNCH("adamw_update");
  m.bump_version();
  v.bump_version();
}

}  // namespace packrat::cuda
