#include "layers/batchnorm2d.h"

#include "autograd/ops.h"
#include "core/backend.h"
#include "layers/init.h"

namespace packrat {

BatchNorm2d::BatchNorm2d(int64_t channels, float momentum, float eps)
    : channels_(channels), momentum_(momentum), eps_(eps) {
  PACKRAT_CHECK(channels > 0, "BatchNorm2d: channels must be positive, got {}", channels);
  TagScope tag(MemTag::Parameter);
  weight_ = register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias_ = register_parameter("bias", Tensor::zeros({channels}));
  running_mean_ = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = register_buffer("running_var", Tensor::full({channels}, 1.0f));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros(Shape{}, DType::i64));
}

int64_t BatchNorm2d::num_batches_tracked() const {
  return num_batches_tracked_.to(Device::cpu()).data<int64_t>()[0];
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4, "batchnorm2d {}: expects a 4-d input (N, C, H, W), got {}",
                LayerScope::current(), x.defined() ? x.describe() : std::string("an undefined tensor"));
  PACKRAT_CHECK(x.dim(1) == channels_, "batchnorm2d {}: input has {} channels, the layer has {}",
                LayerScope::current(), x.dim(1), channels_);
  // Training counts the batch with the running statistics' update (one kernel on a GPU).
  return ops::batchnorm2d(x, weight_, bias_, running_mean_, running_var_, training(), momentum_, eps_,
                          &num_batches_tracked_);
}

}  // namespace packrat
