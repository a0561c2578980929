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
Tensor CudaBackend::softmax_forward(const Tensor&) { pending("softmax_forward"); }
Tensor CudaBackend::softmax_backward(const Tensor&, const Tensor&) { pending("softmax_backward"); }
Backend::CrossEntropyOut CudaBackend::cross_entropy_forward(const Tensor&, const Tensor&, float, bool) {
  pending("cross_entropy_forward");
}
Tensor CudaBackend::cross_entropy_backward(const Tensor&, const Tensor&, float, const Tensor&) {
  pending("cross_entropy_backward");
}
Backend::LayerNormOut CudaBackend::layernorm_forward(const Tensor&, const Tensor&, const Tensor&, float) {
  pending("layernorm_forward");
}
Backend::LayerNormGrads CudaBackend::layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, bool, bool) {
  pending("layernorm_backward");
}
Tensor CudaBackend::dropout_forward(const Tensor&, float, float, uint64_t, uint64_t, Tensor*) {
  pending("dropout_forward");
}
Tensor CudaBackend::mask_scale(const Tensor&, const Tensor&, float) { pending("mask_scale"); }
int64_t CudaBackend::fill_uniform(Tensor&, float, float, uint64_t, uint64_t, uint64_t) { pending("fill_uniform"); }
int64_t CudaBackend::fill_normal(Tensor&, float, float, uint64_t, uint64_t, uint64_t) { pending("fill_normal"); }
Tensor CudaBackend::embedding_forward(const Tensor&, const Tensor&) { pending("embedding_forward"); }
Tensor CudaBackend::embedding_backward(const Tensor&, const Tensor&, int64_t) { pending("embedding_backward"); }
Tensor CudaBackend::transpose_last2(const Tensor&) { pending("transpose_last2"); }
Tensor CudaBackend::pad_channels_subsample(const Tensor&, int64_t, int64_t) { pending("pad_channels_subsample"); }
Tensor CudaBackend::pad_channels_subsample_backward(const Tensor&, const Shape&, Layout, int64_t) {
  pending("pad_channels_subsample_backward");
}
Tensor CudaBackend::permute(const Tensor&, std::span<const int64_t>) { pending("permute"); }
Tensor CudaBackend::concat(std::span<const Tensor>, int64_t) { pending("concat"); }
Tensor CudaBackend::narrow(const Tensor&, int64_t, int64_t, int64_t) { pending("narrow"); }
void CudaBackend::causal_mask_fill(Tensor&) { pending("causal_mask_fill"); }
void CudaBackend::sgd_update(Tensor&, const Tensor&, Tensor&, const SgdStep&) { pending("sgd_update"); }
void CudaBackend::adamw_update(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWStep&) { pending("adamw_update"); }

}  // namespace packrat::cuda
