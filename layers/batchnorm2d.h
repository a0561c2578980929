#pragma once
// nn.BatchNorm2d: weight (C) = 1, bias (C) = 0; buffers running_mean (C) = 0, running_var (C) = 1
// and num_batches_tracked (i64 scalar), the names PyTorch uses.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float momentum = 0.1f, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;  // (N, C, H, W), same layout out

  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  Tensor& running_mean() { return running_mean_; }
  Tensor& running_var() { return running_var_; }
  int64_t num_batches_tracked() const;

 private:
  int64_t channels_;
  float momentum_, eps_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace packrat
