#include "layers/sequential.h"

namespace packrat {

Tensor Sequential::forward(const Tensor& x) {
  PACKRAT_CHECK(!modules_.empty(), "sequential {}: has no layers", LayerScope::current());
  Tensor y = (*modules_.front())(x);
  for (size_t i = 1; i < modules_.size(); ++i) y = (*modules_[i])(y);
  return y;
}

}  // namespace packrat
