// CudaBackend: the embedding gather and its deterministic scatter-add (embedding_kernels.cu).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/embedding_kernels.h"
#include "core/cuda/kernels/rows.h"  // kNoBadIndex

namespace packrat::cuda {

Tensor CudaBackend::embedding_forward(const Tensor& weight, const Tensor& ids) {
  const std::string& layer = LayerScope::current();
  const int64_t num = weight.dim(0), D = weight.dim(1), count = ids.numel();
  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(D);
  Tensor y = Tensor::empty(Shape(dims), DType::f32, Layout::Plain, TagScope::current(), device());  // (N..., D)
  Tensor bad = Tensor::empty(Shape{1}, DType::i64, Layout::Plain, MemTag::Workspace, device());
  auto* bad_index = static_cast<unsigned long long*>(bad.raw());
  PACKRAT_CUDA_CHECK(cudaMemsetAsync(bad_index, 0xFF, sizeof(unsigned long long), nullptr));  // kNoBadIndex
  launch_embedding_forward(weight.device_data<float>(), ids.device_data<int64_t>(), y.device_data<float>(), bad_index,
                           count, num, D);
  PACKRAT_CHECK_LAUNCH("embedding_forward");
  // The contract throws on a bad id, so the host must wait for the flag: one synchronisation per
  // lookup (a model has one or two; the ids came from the host just before).
  unsigned long long first_bad = kNoBadIndex;
  PACKRAT_CUDA_CHECK(cudaMemcpy(&first_bad, bad_index, sizeof first_bad, cudaMemcpyDeviceToHost));
  if (first_bad != kNoBadIndex) {
    const auto k = static_cast<int64_t>(first_bad);
    int64_t id = 0;
    PACKRAT_CUDA_CHECK(cudaMemcpy(&id, ids.device_data<int64_t>() + k, sizeof id, cudaMemcpyDeviceToHost));
    fail("embedding {}: id {} at position {} is out of range [0, {})", layer, id, k, num);
  }
  return y;
}

Tensor CudaBackend::embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) {
  const Tensor g = grad.to_plain();
  const int64_t count = ids.numel(), D = g.dim(-1);
  PACKRAT_CHECK(g.numel() == count * D, "{} backward: gradient {} for {} ids", op_where("embedding"), g.shape().str(),
                count);
  Tensor dweight = Tensor::empty(Shape{num, D}, DType::f32, Layout::Plain, TagScope::current(), device());  // (num, D)
  const auto scratch_bytes = static_cast<int64_t>(embedding_backward_scratch_bytes(count, num));
  Tensor scratch = Tensor::empty(Shape{scratch_bytes}, DType::u8, Layout::Plain, MemTag::Workspace, device());
  launch_embedding_backward(g.device_data<float>(), ids.device_data<int64_t>(), dweight.device_data<float>(),
                            scratch.raw(), count, num, D);
  PACKRAT_CHECK_LAUNCH("embedding_backward");
  return dweight;
}

}  // namespace packrat::cuda
