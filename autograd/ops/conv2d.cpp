// conv2d: forward and both backwards on the input's backend (Backend's convolution section).
// Saves x (for the weight gradient) and the weight (for the input gradient), each only when
// the gradient that needs it is wanted. Under autocast (core/autocast.h) x is cast to the
// autocast dtype, saved so, and y comes out in it; the weight stays f32, read converted.
#include "autograd/ops.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("conv2d")

namespace {

ConvGeometry check_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const std::string where = op_where("conv2d");
  PACKRAT_CHECK(x.defined() && w.defined(), "{}: input and weight must be defined", where);
  PACKRAT_CHECK(x.rank() == 4, "{}: input must be 4-d (N, C, H, W), got {}", where, x.shape().str());
  PACKRAT_CHECK(w.rank() == 4, "{}: weight must be 4-d (Cout, Cin/groups, KH, KW), got {}", where, w.shape().str());
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: input has dtype {}, expected f32, bf16 or f16", where,
                dtype_name(x.dtype()));
  PACKRAT_CHECK(w.dtype() == DType::f32, "{}: weight has dtype {}, expected f32", where, dtype_name(w.dtype()));
  const Layout kept = backend_of(w).conv_weight_layout();
  PACKRAT_CHECK(w.layout() == Layout::Plain || w.layout() == kept,
                "{}: weight must be plain OIHW{}, got {}", where,
                kept == Layout::Plain ? "" : fmt::format(" or {} (the backend's weight layout)", layout_name(kept)),
                w.describe());
  PACKRAT_CHECK(o.groups >= 1, "{}: groups must be >= 1, got {}", where, o.groups);
  PACKRAT_CHECK(o.stride_h >= 1 && o.stride_w >= 1, "{}: stride must be >= 1, got ({}, {})", where, o.stride_h,
                o.stride_w);
  PACKRAT_CHECK(o.dilation_h >= 1 && o.dilation_w >= 1, "{}: dilation must be >= 1, got ({}, {})", where,
                o.dilation_h, o.dilation_w);
  PACKRAT_CHECK(o.pad_h >= 0 && o.pad_w >= 0, "{}: padding must be >= 0, got ({}, {})", where, o.pad_h, o.pad_w);
  ConvGeometry g{};
  g.N = x.dim(0), g.Cin = x.dim(1), g.H = x.dim(2), g.W = x.dim(3);
  g.Cout = w.dim(0), g.KH = w.dim(2), g.KW = w.dim(3);
  g.stride_h = o.stride_h, g.stride_w = o.stride_w, g.pad_h = o.pad_h, g.pad_w = o.pad_w;
  g.dilation_h = o.dilation_h, g.dilation_w = o.dilation_w, g.groups = o.groups;
  PACKRAT_CHECK(g.Cin % o.groups == 0, "{}: input has {} channels, not divisible by groups={}", where, g.Cin,
                o.groups);
  PACKRAT_CHECK(g.Cout % o.groups == 0, "{}: weight has {} output channels, not divisible by groups={}", where, g.Cout,
                o.groups);
  PACKRAT_CHECK(g.Cin == w.dim(1) * o.groups, "{}: input has {} channels, weight expects {}{}", where, g.Cin,
                w.dim(1) * o.groups, o.groups > 1 ? fmt::format(" ({} groups of {})", o.groups, w.dim(1)) : "");
  const int64_t ekh = (g.KH - 1) * o.dilation_h + 1, ekw = (g.KW - 1) * o.dilation_w + 1;
  PACKRAT_CHECK(ekh <= g.H + 2 * o.pad_h && ekw <= g.W + 2 * o.pad_w,
                "{}: kernel {}x{} (dilated {}x{}) is larger than the padded input {}x{}", where, g.KH, g.KW, ekh, ekw,
                g.H + 2 * o.pad_h, g.W + 2 * o.pad_w);
  g.OH = (g.H + 2 * o.pad_h - ekh) / o.stride_h + 1;
  g.OW = (g.W + 2 * o.pad_w - ekw) / o.stride_w + 1;
  g.has_bias = b.defined();
  if (g.has_bias) {
    PACKRAT_CHECK(b.rank() == 1 && b.dim(0) == g.Cout, "{}: bias has shape {}, expected ({},)", where,
                  b.shape().str(), g.Cout);
    PACKRAT_CHECK(b.dtype() == DType::f32, "{}: bias has dtype {}, expected f32", where, dtype_name(b.dtype()));
  }
  return g;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  check_same_device("conv2d", {&x, &weight, &bias});
  ConvGeometry g = check_conv(x, weight, bias, o);
  Backend& be = backend_of(x);
  // Autocast: x in its dtype (saved so); a backend without native kernels for it computes in
  // f32 on the rounded values (kernel), and y comes back in it.
  const Tensor xc = autocast_operand(x);
  const DType data = xc.dtype();
  g.dtype = be.conv_computes_in(data) ? data : DType::f32;
  // The kernel reads x in its own layout; keep that copy so that backward needs no reorder.
  const Tensor src = be.conv_input(xc, g);
  // At the kernels' edges (no kernels for the 16-bit dtype) the weight's values are rounded to it
  // here; the 16-bit kernels round it themselves.
  const bool at_edges = g.dtype != data;
  const Tensor wk = at_edges ? at_kernel_edge(weight, data, g.dtype) : weight;
  // A weight that cannot change before the next call (eval, or frozen) keeps its prepared copy.
  const bool keep_weights = (!grad_enabled() || !weight.requires_grad()) && !at_edges;
  const Tf32ForHalfOperands tf32(at_edges);  // the operands hold 16-bit values: TF32 reads them exactly
  Tensor y = in_dtype(be.conv_forward(src.to(g.dtype), wk, bias, g, keep_weights), data);  // (N, Cout, OH, OW)
  if (!needs_grad({&x, &weight, &bias})) return y;

  const bool want_dx = x.requires_grad();
  const bool want_dw = weight.requires_grad() || (bias.defined() && bias.requires_grad());
  std::vector<SavedHandle> saved;
  int ix = -1, iw = -1;
  if (want_dw) {
    ix = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(src, SaveRequest{Need::Value, nullptr, "conv2d", LayerScope::current()}));
  }
  if (want_dx) {
    iw = static_cast<int>(saved.size());
    saved.push_back(save_for_backward(weight, SaveRequest{Need::Value, nullptr, "conv2d", LayerScope::current()}));
  }
  const Layout x_layout = x.layout(), w_layout = weight.layout();
  record("conv2d", {&x, &weight, &bias}, {&y}, std::move(saved),
         [g, data, at_edges, x_layout, w_layout, ix, iw](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tf32ForHalfOperands tf32(at_edges);
           Backend& be = backend_of(grads[0]);
           const bool want_dx = n.inputs[0] && iw >= 0;
           const bool want_dw = ix >= 0 && (n.inputs[1] || n.inputs[2]);
           // The weight gradient's kernels may compute in f32 on a 16-bit convolution's values: they
           // then read x loaded in f32 and the f32 output gradient as they are.
           ConvGeometry gw_geometry = g;
           if (want_dw) gw_geometry.dtype = be.conv_weight_gradient_dtype(g);
           const bool dw_from_f32 = gw_geometry.dtype != g.dtype;
           // (N, Cout, OH, OW) in the kernels' dtype, as the backward kernels of g read it
           Tensor gy;
           if (want_dx || (want_dw && !dw_from_f32))
             gy = be.conv_grad_output(at_edges ? at_kernel_edge(grads[0], data, g.dtype) : grads[0], g);
           std::vector<Tensor> out(3);
           if (want_dx) {
             Tensor w = n.load(static_cast<size_t>(iw));  // plain or the backend's weight layout
             if (at_edges) w = at_kernel_edge(w, data, g.dtype);
             // x's gradient so far (a residual block's input: from the shortcut) takes this one
             // in place; the tape then adds nothing.
             Tensor so_far = n.grad_so_far(0);
             out[0] = so_far.defined() && so_far.layout() == x_layout && so_far.dtype() == DType::f32
                          ? be.conv_backward_data_into(gy, w, g, so_far)
                          : be.conv_backward_data(gy, w, g).to_layout(x_layout);  // (N, Cin, H, W)
             if (dw_from_f32) gy = Tensor();  // before x is loaded: the backward's peak
           }
           if (want_dw) {
             Tensor xs = n.load(static_cast<size_t>(ix), gw_geometry.dtype);
             Tensor gw, gb;
             be.conv_backward_weights(xs, dw_from_f32 ? grads[0] : gy, gw_geometry, gw, gb);
             // The gradient in its weight's layout (a no-op for a weight the backend's Conv2d made).
             if (n.inputs[1]) out[1] = gw.to_layout(w_layout);
             if (n.inputs[2]) out[2] = gb;
           }
           return out;
         });
  return y;
}

}  // namespace packrat::ops
