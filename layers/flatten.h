#pragma once
// nn.Flatten: (N, d1, d2, ...) -> (N, d1*d2*...) from start_dim on; reorders blocked data to plain.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t start_dim_;
};

}  // namespace packrat
