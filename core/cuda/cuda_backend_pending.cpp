// The primitives the CUDA backend does not run yet. Each one throws, naming
// itself and the device, so that a model placed on a GPU stops at the first op
// without a kernel instead of computing on the host behind the user's back. The
// CUDA backend issue (cuDNN, cuBLAS and packrat's kernels) replaces these one
// section at a time.
#include "core/cuda/cuda_backend_impl.h"

namespace packrat::cuda {

void CudaBackend::pending(const char* primitive) const {
  fail(
      "{}: the CUDA backend has no kernel for {} yet; train this model on the "
      "CPU (device: cpu)",
      device().str(), primitive);
}

Tensor CudaBackend::pointwise_forward(ActivationId, const Tensor&) { pending("pointwise_forward"); }
Tensor CudaBackend::pointwise_derivative(ActivationId, const Tensor&, bool) { pending("pointwise_derivative"); }
Tensor CudaBackend::pointwise_backward(ActivationId, const Tensor&, const Tensor&, bool) {
  pending("pointwise_backward");
}
Tensor CudaBackend::binary(BinaryOp, const Tensor&, const Tensor&) { pending("binary"); }
Tensor CudaBackend::scale(const Tensor&, double) { pending("scale"); }
void CudaBackend::accumulate(Tensor&, const Tensor&) { pending("accumulate"); }
double CudaBackend::reduce_sum(const Tensor&) { pending("reduce_sum"); }
double CudaBackend::reduce_sum_squares(const Tensor&) { pending("reduce_sum_squares"); }
Tensor CudaBackend::reduce_sum_to(const Tensor&, const Shape&) { pending("reduce_sum_to"); }
Tensor CudaBackend::dropout_forward(const Tensor&, float, float, uint64_t, uint64_t, Tensor*) {
  pending("dropout_forward");
}
Tensor CudaBackend::mask_scale(const Tensor&, const Tensor&, float) { pending("mask_scale"); }
int64_t CudaBackend::fill_uniform(Tensor&, float, float, uint64_t, uint64_t, uint64_t) { pending("fill_uniform"); }
int64_t CudaBackend::fill_normal(Tensor&, float, float, uint64_t, uint64_t, uint64_t) { pending("fill_normal"); }
void CudaBackend::sgd_update(Tensor&, const Tensor&, Tensor&, const SgdStep&) { pending("sgd_update"); }
void CudaBackend::adamw_update(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWStep&) { pending("adamw_update"); }

}  // namespace packrat::cuda
