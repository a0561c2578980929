// linear and matmul on the backend's matmul (Backend's matmul section). Both work on plain data:
// blocked 4-d inputs are reordered first, and their input gradients go back to the input's layout.
// Under autocast (core/autocast.h) the operands are cast to its dtype and saved so, the output
// comes out in it, and a weight stays f32 (the kernel reads it converted); gradients are f32.
#include "autograd/ops.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("linear", "matmul")

namespace {
SaveRequest value_request(std::string_view op) { return SaveRequest{Need::Value, nullptr, op, LayerScope::current()}; }

Tensor back_to_layout(const Tensor& plain, const Shape& shape, Layout layout) {
  return plain.reshape(shape).to_layout(layout);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_device("linear", {&x, &weight, &bias});
  const std::string where = op_where("linear");
  PACKRAT_CHECK(x.defined() && weight.defined(), "{}: input and weight must be defined", where);
  PACKRAT_CHECK(weight.rank() == 2, "{}: weight must be 2-d (out, in), got {}", where, weight.shape().str());
  PACKRAT_CHECK(x.rank() >= 1, "{}: input must have at least one dimension", where);
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: input has dtype {}, expected f32, bf16 or f16", where,
                dtype_name(x.dtype()));
  PACKRAT_CHECK(weight.dtype() == DType::f32, "{}: weight has dtype {}, expected f32", where,
                dtype_name(weight.dtype()));
  const int64_t in = weight.dim(1), out = weight.dim(0);
  PACKRAT_CHECK(x.dim(-1) == in, "{}: input has {} features, weight expects {}", where, x.dim(-1), in);
  if (bias.defined()) {
    PACKRAT_CHECK(bias.rank() == 1 && bias.dim(0) == out, "{}: bias has shape {}, expected ({},)", where,
                  bias.shape().str(), out);
    PACKRAT_CHECK(bias.dtype() == DType::f32, "{}: bias has dtype {}, expected f32", where, dtype_name(bias.dtype()));
  }
  const int64_t M = x.numel() / std::max<int64_t>(in, 1);
  const Tensor x2 = autocast_operand(x).to_plain().reshape(Shape{M, in});  // (M, in) (a copy only when x is blocked)
  const DType data = x2.dtype(), kernel = kernel_dtype(backend_of(x), data);
  std::vector<int64_t> ydims = x.shape().dims();
  ydims.back() = out;
  // y = x2 @ weight^T + bias: weight (out, in) read transposed as (in, out); at the kernels' edges
  // (no kernels for the 16-bit dtype) its values rounded to it here, as those kernels round it.
  const bool at_edges = kernel != data;
  const Tf32ForHalfOperands tf32(at_edges);  // the operands hold 16-bit values: TF32 reads them exactly
  Tensor y = in_dtype(backend_of(x).matmul(x2.to(kernel), false, at_edges ? at_kernel_edge(weight, data, kernel) : weight,
                                           true, 1, M, in, out, bias, Shape(ydims), kernel),
                      data);  // (..., out)
  if (!needs_grad({&x, &weight, &bias})) return y;

  std::vector<SavedHandle> saved;
  int ix = -1, iw = -1;
  if (weight.requires_grad()) {
    ix = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(x2, value_request("linear")));
  }
  if (x.requires_grad()) {
    iw = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(weight, value_request("linear")));
  }
  const Shape x_shape = x.shape();
  const Layout x_layout = x.layout();
  record("linear", {&x, &weight, &bias}, {&y}, std::move(saved),
         [=](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tensor g = grads[0].to_plain().reshape(Shape{M, out});  // (M, out) f32
           const Tensor gk = at_kernel_edge(g, data, kernel);            // in the kernels' dtype
           const Tf32ForHalfOperands tf32(at_edges);
           Backend& be = backend_of(g);
           std::vector<Tensor> r(3);
           if (n.inputs[0]) {
             Tensor w = n.load(static_cast<size_t>(iw)).to_plain();
             if (at_edges) w = at_kernel_edge(w, data, kernel);
             r[0] = back_to_layout(be.matmul(gk, false, w, false, 1, M, out, in, Tensor(), Shape{M, in}), x_shape,
                                   x_layout);  // (M, out) @ (out, in)
           }
           if (n.inputs[1]) {
             Tensor xs = n.load(static_cast<size_t>(ix), kernel).to_plain();
             r[1] = be.matmul(gk, true, xs, false, 1, out, M, in, Tensor(), Shape{out, in});  // (out, M) @ (M, in)
           }
           if (n.inputs[2]) r[2] = be.column_sums(g, M, out);  // (out)
           return r;
         });
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device("matmul", {&a, &b});
  const std::string where = op_where("matmul");
  PACKRAT_CHECK(a.defined() && b.defined(), "{}: both operands must be defined", where);
  PACKRAT_CHECK(a.rank() >= 2 && b.rank() == a.rank(), "{}: operands must have the same rank >= 2, got {} and {}",
                where, a.shape().str(), b.shape().str());
  PACKRAT_CHECK(is_f32_or_half(a.dtype()) && is_f32_or_half(b.dtype()),
                "{}: operands have dtypes {} and {}, expected f32, bf16 or f16", where, dtype_name(a.dtype()),
                dtype_name(b.dtype()));
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < a.rank(); ++i) {
    PACKRAT_CHECK(a.dim(i) == b.dim(i), "{}: batch dimensions differ: {} and {}", where, a.shape().str(),
                  b.shape().str());
    batch *= a.dim(i);
  }
  const int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  PACKRAT_CHECK(b.dim(-2) == K, "{}: cannot multiply {} by {}: inner dimensions {} and {} differ", where,
                a.shape().str(), b.shape().str(), K, b.dim(-2));
  std::vector<int64_t> cdims = a.shape().dims();
  cdims.back() = N;
  // Autocast casts both; outside it, mixed operands meet in f32 (PyTorch's promotion).
  const DType data = autocast_dtype() != DType::f32 ? autocast_dtype() : result_dtype({&a, &b});
  const Tensor ap = a.to_plain().to(data), bp = b.to_plain().to(data);
  const DType kernel = kernel_dtype(backend_of(a), data);
  const Tf32ForHalfOperands tf32(kernel != data);  // the operands hold 16-bit values: TF32 reads them exactly
  Tensor c = in_dtype(
      backend_of(a).matmul(ap.to(kernel), false, bp.to(kernel), false, batch, M, K, N, Tensor(), Shape(cdims), kernel),
      data);  // (B..., M, N)
  if (!needs_grad({&a, &b})) return c;

  std::vector<SavedHandle> saved;
  int ia = -1, ib = -1;
  if (b.requires_grad()) {
    ia = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(ap, value_request("matmul")));
  }
  if (a.requires_grad()) {
    ib = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(bp, value_request("matmul")));
  }
  const Shape a_shape = a.shape(), b_shape = b.shape();
  const Layout a_layout = a.layout(), b_layout = b.layout();
  record("matmul", {&a, &b}, {&c}, std::move(saved),
         [=](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tensor g = at_kernel_edge(grads[0].to_plain(), data, kernel);  // (B..., M, N) in the kernels' dtype
           const Tf32ForHalfOperands tf32(kernel != data);
           Backend& be = backend_of(g);
           std::vector<Tensor> r(2);
           if (n.inputs[0]) {  // da = g @ b^T: (M, N) @ (N, K)
             Tensor bs = n.load(static_cast<size_t>(ib), kernel).to_plain();
             r[0] = back_to_layout(be.matmul(g, false, bs, true, batch, M, N, K, Tensor(), a_shape), a_shape,
                                   a_layout);
           }
           if (n.inputs[1]) {  // db = a^T @ g: (K, M) @ (M, N)
             Tensor as = n.load(static_cast<size_t>(ia), kernel).to_plain();
             r[1] = back_to_layout(be.matmul(as, true, g, false, batch, K, M, N, Tensor(), b_shape), b_shape,
                                   b_layout);
           }
           return r;
         });
  return c;
}

}  // namespace packrat::ops
