// add, mul, scale: elementwise over the buffers as they lie. The output keeps the first
// operand's layout; a second operand in another layout is reordered to it first.
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat::ops {

namespace {

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(a.defined() && b.defined(), "{} {}: an operand is undefined", op, layer);
  check_same_device(op, {&a, &b});
  PACKRAT_CHECK(a.shape() == b.shape(), "{} {}: operand shapes {} and {} differ (no broadcasting)", op, layer,
                a.shape().str(), b.shape().str());
  PACKRAT_CHECK(a.dtype() == b.dtype(), "{} {}: operand dtypes {} and {} differ", op, layer, dtype_name(a.dtype()),
                dtype_name(b.dtype()));
  PACKRAT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, "{} {}: expects f32 or f64 operands, got {}", op,
                layer, dtype_name(a.dtype()));
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) { return backend_of(a).binary(op, a, b); }

Tensor scaled(const Tensor& a, double s) { return backend_of(a).scale(a, s); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_pair("add", a, b);
  Tensor y = binary(BinaryOp::Add, a, b);
  if (needs_grad({&a, &b})) {
    const Layout la = a.layout(), lb = b.layout();
    record("add", {&a, &b}, {&y}, {}, [la, lb](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {g[0].to_layout(la), g[0].to_layout(lb)};  // passed through (accumulation is out of place)
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
    record("mul", {&a, &b}, {&y}, std::move(saved),
           [ga, gb, la, lb](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             std::vector<Tensor> out(2);
             size_t k = 0;
             if (ga) out[0] = binary(BinaryOp::Mul, g[0], n.load(k++)).to_layout(la);
             if (gb) out[1] = binary(BinaryOp::Mul, g[0], n.load(k++)).to_layout(lb);
             return out;
           });
  }
  return y;
}

Tensor scale(const Tensor& a, float s) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(a.defined(), "scale {}: the operand is undefined", layer);
  PACKRAT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, "scale {}: expects f32 or f64, got {}", layer,
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
