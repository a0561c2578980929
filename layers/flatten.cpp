#include "layers/flatten.h"

#include <algorithm>

#include "autograd/ops.h"

namespace packrat {

Tensor Flatten::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && start_dim_ >= 0 && start_dim_ < std::max<int64_t>(x.rank(), 1),
                "flatten {}: start_dim {} out of range for input {}", LayerScope::current(), start_dim_,
                x.defined() ? x.describe() : std::string("an undefined tensor"));
  return ops::flatten(x, start_dim_);
}

}  // namespace packrat
