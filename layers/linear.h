#pragma once
// nn.Linear: weight (out, in), optional bias (out); PyTorch's default init from Philox(seed).
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, uint64_t seed);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)

  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

}  // namespace packrat
