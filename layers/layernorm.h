#pragma once
// nn.LayerNorm over the last dimension: weight (D) = 1, bias (D) = 0.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;  // (..., D)
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  int64_t dim_;
  float eps_;
  Tensor weight_, bias_;
};

}  // namespace packrat
