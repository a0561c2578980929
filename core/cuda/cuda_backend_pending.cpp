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

Tensor CudaBackend::conv_input(const Tensor&, const ConvGeometry&) { pending("conv_input"); }
Tensor CudaBackend::conv_forward(const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&, bool) {
  pending("conv_forward");
}
Tensor CudaBackend::conv_backward_data(const Tensor&, const Tensor&, const ConvGeometry&) {
  pending("conv_backward_data");
}
void CudaBackend::conv_backward_weights(const Tensor&, const Tensor&, const ConvGeometry&, Tensor&, Tensor&) {
  pending("conv_backward_weights");
}
Tensor CudaBackend::matmul(const Tensor&, bool, const Tensor&, bool, int64_t, int64_t, int64_t, int64_t, const Tensor&,
                           const Shape&) {
  pending("matmul");
}
Tensor CudaBackend::column_sums(const Tensor&, int64_t, int64_t) { pending("column_sums"); }
void CudaBackend::batchnorm_forward_training(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&,
                                             Tensor&) {
  pending("batchnorm_forward_training");
}
Tensor CudaBackend::batchnorm_forward_inference(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                const Tensor&, float) {
  pending("batchnorm_forward_inference");
}
void CudaBackend::batchnorm_backward(const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&, const Tensor&,
                                     float, bool, Tensor&, Tensor&, Tensor&) {
  pending("batchnorm_backward");
}
void CudaBackend::batchnorm_update_running(Tensor&, const Tensor&, float, double) {
  pending("batchnorm_update_running");
}
void CudaBackend::batchnorm_count_batch(Tensor&) { pending("batchnorm_count_batch"); }
Tensor CudaBackend::pool_forward(const Tensor&, const PoolGeometry&, PoolKind, Tensor*) { pending("pool_forward"); }
Tensor CudaBackend::pool_backward(const Tensor&, const Tensor&, const PoolGeometry&, PoolKind, Layout) {
  pending("pool_backward");
}
DType CudaBackend::pool_index_dtype(int64_t) { pending("pool_index_dtype"); }
Tensor CudaBackend::adaptive_avgpool_forward(const Tensor&, int64_t, int64_t) { pending("adaptive_avgpool_forward"); }
Tensor CudaBackend::adaptive_avgpool_backward(const Tensor&, const Shape&, Layout) {
  pending("adaptive_avgpool_backward");
}
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

}  // namespace packrat::cuda
