// add, mul, scale. Operands of one shape go elementwise over the buffers as they lie: the
// output keeps the first operand's layout, a second operand in another layout is reordered to
// it first. Other shapes broadcast numpy-style ((N, C, 1, 1) * (N, C, H, W), as in
// squeeze-and-excitation) into a plain output; the gradient of a stretched operand is summed
// back to its shape.
#include <algorithm>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("mul")

namespace {

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(a.defined() && b.defined(), "{} {}: an operand is undefined", op, layer);
  check_same_device(op, {&a, &b});
  const auto &da = a.shape().dims(), &db = b.shape().dims();
  for (size_t i = 0; i < std::min(da.size(), db.size()); ++i) {
    const int64_t x = da[da.size() - 1 - i], y = db[db.size() - 1 - i];
    PACKRAT_CHECK(x == y || x == 1 || y == 1, "{} {}: operand shapes {} and {} do not broadcast", op, layer,
                  a.shape().str(), b.shape().str());
  }
  // f32 and 16-bit operands mix (autocast: PyTorch's promotion); f64 pairs only with f64.
  PACKRAT_CHECK(
      (is_f32_or_half(a.dtype()) && is_f32_or_half(b.dtype())) || (a.dtype() == DType::f64 && b.dtype() == DType::f64),
      "{} {}: operand dtypes {} and {}: expects f32, bf16, f16 or two f64 operands", op, layer, dtype_name(a.dtype()),
      dtype_name(b.dtype()));
}

// Computed in f32 where an operand is 16-bit; the result in result_dtype (16-bit when both are):
// by the backend on the operands as they lie where it reads their dtype, else on f32 copies.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Backend& be = backend_of(a);
  if (a.dtype() == b.dtype() && be.binary_reads(a.dtype())) return be.binary(op, a, b);
  return in_dtype(be.binary(op, as_f32(a), as_f32(b)), result_dtype({&a, &b}));
}

Tensor scaled(const Tensor& a, double s) { return in_dtype(backend_of(a).scale(as_f32(a), s), a.dtype()); }

// The gradient of an operand of `shape` in `layout` from g of the output's shape: g summed over
// the dims the operand was stretched along, or g itself in the operand's layout.
Tensor to_operand(const Tensor& g, const Shape& shape, Layout layout) {
  if (g.shape() == shape) return g.to_layout(layout);
  return backend_of(g).reduce_sum_to(g, shape).to_layout(layout);
}

// The gradient of a product's operand of `shape` in `layout`: g * other summed to the operand's shape;
// for a broadcast operand (squeeze-and-excitation's scale) without the product's tensor where the
// backend can.
Tensor product_gradient(const Tensor& g, const Tensor& other, const Shape& shape, Layout layout) {
  if (shape != g.shape() && g.dtype() == DType::f32)
    return backend_of(g).reduce_sum_of_product_to(g, other, shape).to_layout(layout);
  return to_operand(binary(BinaryOp::Mul, g, other), shape, layout);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_pair("add", a, b);
  Tensor y = binary(BinaryOp::Add, a, b);
  if (needs_grad({&a, &b})) {
    const Layout la = a.layout(), lb = b.layout();
    const Shape sa = a.shape(), sb = b.shape();
    record("add", {&a, &b}, {&y}, {}, [la, lb, sa, sb](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      // Passed through where the shapes agree (accumulation is out of place).
      return {to_operand(g[0], sa, la), to_operand(g[0], sb, lb)};
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_pair("mul", a, b);
  Tensor y = binary(BinaryOp::Mul, a, b);
  if (needs_grad({&a, &b})) {
    // d/da = g * b, d/db = g * a: keep each operand only if the other one needs its gradient.
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    SaveRequest req;
    req.need = Need::Value;
    req.op = "mul";
    req.name = LayerScope::current();
    std::vector<SavedHandle> saved;
    if (ga) saved.push_back(save_for_backward(b, req));
    if (gb) saved.push_back(save_for_backward(a, req));
    const Layout la = a.layout(), lb = b.layout();
    const Shape sa = a.shape(), sb = b.shape();
    const DType da = a.dtype(), db = b.dtype();
    record("mul", {&a, &b}, {&y}, std::move(saved),
           [ga, gb, la, lb, sa, sb, da, db](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             std::vector<Tensor> out(2);
             size_t k = 0;
             // Each operand loaded in the dtype it was saved in (a compressing store's plain load
             // decodes f32): a 16-bit one is read as it lies where the backend can.
             if (ga) out[0] = product_gradient(g[0], n.load(k++, db), sa, la);
             if (gb) out[1] = product_gradient(g[0], n.load(k++, da), sb, lb);
             return out;
           });
  }
  return y;
}

Tensor scale(const Tensor& a, float s) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(a.defined(), "scale {}: the operand is undefined", layer);
  PACKRAT_CHECK(is_floating(a.dtype()), "scale {}: expects f32, f64, bf16 or f16, got {}", layer,
                dtype_name(a.dtype()));
  check_same_device("scale", {&a});
  Tensor y = scaled(a, s);
  if (needs_grad({&a})) {
    record("scale", {&a}, {&y}, {}, [s](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {scaled(g[0], s)};
    });
  }
  return y;
}

}  // namespace packrat::ops
