#include "layers/linear.h"

#include "autograd/ops.h"
#include "layers/init.h"

namespace packrat {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, uint64_t seed)
    : in_(in_features), out_(out_features) {
  PACKRAT_CHECK(in_ > 0 && out_ > 0, "Linear: features must be positive, got in={} out={}", in_, out_);
  TagScope tag(MemTag::Parameter);
  PhiloxStream rng(seed, 0);
  Tensor w = Tensor::empty({out_, in_});  // (out, in)
  init::default_weight(w, rng);
  weight_ = register_parameter("weight", w);
  if (bias) {
    Tensor b = Tensor::empty({out_});  // (out)
    PhiloxStream brng(seed, 1);
    init::default_bias(b, in_, brng);
    bias_ = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() >= 1, "linear {}: expects an input (..., {}), got {}", LayerScope::current(),
                in_, x.defined() ? x.describe() : std::string("an undefined tensor"));
  PACKRAT_CHECK(x.dim(-1) == in_, "linear {}: input has {} features in its last dimension, weight expects {}",
                LayerScope::current(), x.dim(-1), in_);
  return ops::linear(x, weight_, bias_);
}

}  // namespace packrat
