#pragma once
// A pointwise activation by name ("relu", "gelu", "silu", ...; see autograd/pointwise.h).
#include <string>
#include <string_view>

#include "layers/module.h"

namespace packrat {

class Activation : public Module {
 public:
  explicit Activation(std::string_view fn);  // throws naming the function when unknown
  Tensor forward(const Tensor& x) override;  // same shape and layout
  const std::string& fn() const { return fn_; }

 private:
  std::string fn_;
};

}  // namespace packrat
