#include "layers/activation.h"

#include "autograd/ops.h"
#include "autograd/pointwise.h"

namespace packrat {

Activation::Activation(std::string_view fn) : fn_(fn) {
  (void)pointwise_by_name(fn);  // throws packrat::Error naming the unknown function
}

Tensor Activation::forward(const Tensor& x) { return ops::activation(x, fn_); }

}  // namespace packrat
