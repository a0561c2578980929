#include "layers/layernorm.h"

#include "autograd/ops.h"

namespace packrat {

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  PACKRAT_CHECK(dim > 0, "LayerNorm: dimension must be positive, got {}", dim);
  TagScope tag(MemTag::Parameter);
  weight_ = register_parameter("weight", Tensor::full({dim}, 1.0f));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() >= 1 && x.dim(-1) == dim_,
                "layernorm {}: expects an input (..., {}), got {}", LayerScope::current(), dim_,
                x.defined() ? x.describe() : std::string("an undefined tensor"));
  return ops::layernorm(x, weight_, bias_, eps_);
}

}  // namespace packrat
