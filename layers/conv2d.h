#pragma once
// nn.Conv2d: weight (out, in/groups, k, k), optional bias (out). PyTorch's default init
// (kaiming_uniform with a = sqrt(5)) from Philox keyed by `seed`.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

struct ConvConfig {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, const ConvConfig& c, uint64_t seed);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, H', W')

  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }  // undefined without bias
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel() const { return kernel_; }
  const ConvConfig& config() const { return c_; }

 private:
  int64_t in_, out_, kernel_;
  ConvConfig c_;
  Tensor weight_, bias_;
};

}  // namespace packrat
