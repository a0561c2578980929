// Pointwise activations as ops. With grad, forward and save go through the store's one-pass
// entry point (Need::Derivative), so a compressing store can keep only what f' needs (a few-bit
// interval index, or an exact mask for the relu family); backward is grad_out * f'(x), fused by
// the store where it can.
#include <tuple>

#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

Tensor activation(const Tensor& x, std::string_view name) {
  const Pointwise& fn = pointwise_by_name(name);
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "{} {}: the input is undefined", fn.name, layer);
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{} {}: expects an f32, bf16 or f16 input, got {} {}", fn.name, layer,
                x.shape().str(), dtype_name(x.dtype()));
  // A 16-bit x (autocast): f in f32, y in x's dtype.
  Backend& be = backend_of(x);
  if (!needs_grad({&x})) return in_dtype(be.pointwise_forward(fn.id, kernel_operand(be, x)), x.dtype());

  SaveRequest req;
  req.need = Need::Derivative;
  req.fn = &fn;
  req.op = fn.name;
  req.name = layer;
  Tensor y;
  SavedHandle h;
  if (x.storage()->allocation->tag() == MemTag::Parameter) {
    // A parameter goes through the pass-through store (never compressed): save it plainly.
    y = backend_of(x).pointwise_forward(fn.id, x);
    h = save_for_backward(fn.derivative_from_output ? y : x, req);
  } else {
    std::tie(y, h) = current_policy().store_for(req).forward_and_save(x, req);
  }
  const Layout x_layout = x.layout();
  record(std::string(fn.name), {&x}, {&y}, {h},
         [x_layout](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
           const SavedHandle& s = n.saved[0];
           Tensor gx = s.store->apply_derivative(s, g[0]);
           return {gx.to_layout(x_layout)};
         });
  return y;
}

Tensor relu(const Tensor& x) { return activation(x, "relu"); }
Tensor gelu(const Tensor& x) { return activation(x, "gelu"); }

}  // namespace packrat::ops
