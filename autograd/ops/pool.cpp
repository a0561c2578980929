// Pooling on the input's backend (Backend's pooling section), in any layout (kept).
// maxpool2d saves only the argmax within each window (Need::Index, a few bits); avgpool2d and
// adaptive_avgpool2d save nothing.
#include <bit>

#include "autograd/ops.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("maxpool2d")

namespace {

// x as the backend's pooling reads it: as it lies, or an f32 copy of a 16-bit x (y comes back in
// the dtype it read, and the op gives it in x's).
Tensor pool_input(const Tensor& x) { return backend_of(x).pool_reads(x.dtype()) ? x : as_f32(x); }

PoolGeometry check_pool(std::string_view op, const Tensor& x, const Pool2dOptions& o) {
  const std::string where = op_where(op);
  PACKRAT_CHECK(x.defined(), "{}: input must be defined", where);
  PACKRAT_CHECK(x.rank() == 4, "{}: input must be 4-d (N, C, H, W), got {}", where, x.shape().str());
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: input has dtype {}, expected f32, bf16 or f16", where,
                dtype_name(x.dtype()));
  PACKRAT_CHECK(o.kernel_h >= 1 && o.kernel_w >= 1, "{}: kernel must be >= 1, got {}x{}", where, o.kernel_h,
                o.kernel_w);
  PACKRAT_CHECK(o.stride_h >= 1 && o.stride_w >= 1, "{}: stride must be >= 1, got ({}, {})", where, o.stride_h,
                o.stride_w);
  PACKRAT_CHECK(o.pad_h >= 0 && o.pad_w >= 0 && 2 * o.pad_h <= o.kernel_h && 2 * o.pad_w <= o.kernel_w,
                "{}: padding ({}, {}) must be between 0 and half the kernel {}x{}", where, o.pad_h, o.pad_w,
                o.kernel_h, o.kernel_w);
  PoolGeometry g{};
  g.N = x.dim(0), g.C = x.dim(1), g.H = x.dim(2), g.W = x.dim(3);
  g.KH = o.kernel_h, g.KW = o.kernel_w, g.stride_h = o.stride_h, g.stride_w = o.stride_w;
  g.pad_h = o.pad_h, g.pad_w = o.pad_w;
  PACKRAT_CHECK(g.KH <= g.H + 2 * g.pad_h && g.KW <= g.W + 2 * g.pad_w,
                "{}: kernel {}x{} is larger than the padded input {}x{}", where, g.KH, g.KW, g.H + 2 * g.pad_h,
                g.W + 2 * g.pad_w);
  g.OH = (g.H + 2 * g.pad_h - g.KH) / g.stride_h + 1;
  g.OW = (g.W + 2 * g.pad_w - g.KW) / g.stride_w + 1;
  return g;
}

// Bits the largest index within a window of n elements needs (at least 1).
int64_t index_bits(int64_t n) { return std::max<int64_t>(1, std::bit_width(static_cast<uint64_t>(n - 1))); }

}  // namespace

Tensor maxpool2d(const Tensor& x, const Pool2dOptions& o) {
  const PoolGeometry g = check_pool("maxpool2d", x, o);
  Backend& be = backend_of(x);
  // A 16-bit x (autocast): pooled in f32 (or read as its f32 values), y in x's dtype (exact for the max).
  if (!needs_grad({&x})) return in_dtype(be.pool_forward(pool_input(x), g, PoolKind::Max, nullptr), x.dtype());
  Tensor argmax;  // (N, C, OH, OW) pool_index_dtype(KH * KW), index within the window, y's layout
  Tensor y = in_dtype(be.pool_forward(pool_input(x), g, PoolKind::Max, &argmax), x.dtype());
  SaveRequest r{Need::Index, nullptr, "maxpool2d", LayerScope::current()};
  r.index_bits = index_bits(g.KH * g.KW);
  const Layout layout = x.layout();
  const DType idx_dtype = argmax.dtype();
  record("maxpool2d", {&x}, {&y}, {save_for_backward(argmax, r)},
         [g, layout, idx_dtype](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tensor idx = n.load(0).to(idx_dtype).to_layout(layout);
           return {backend_of(idx).pool_backward(grads[0], idx, g, PoolKind::Max, layout)};
         });
  return y;
}

namespace {
Tensor average_pool(const Tensor& x, const PoolGeometry& g, PoolKind kind, std::string_view op) {
  Tensor y = in_dtype(backend_of(x).pool_forward(pool_input(x), g, kind, nullptr), x.dtype());
  if (!needs_grad({&x})) return y;
  const Layout layout = x.layout();
  record(std::string(op), {&x}, {&y}, {},
         [g, kind, layout](Node&, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           return {backend_of(grads[0]).pool_backward(grads[0], Tensor(), g, kind, layout)};
         });
  return y;
}
}  // namespace

Tensor avgpool2d(const Tensor& x, const Pool2dOptions& o) {
  return average_pool(x, check_pool("avgpool2d", x, o), PoolKind::AvgIncludePadding, "avgpool2d");
}

Tensor adaptive_avgpool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  const std::string where = op_where("adaptive_avgpool2d");
  PACKRAT_CHECK(x.defined() && x.rank() == 4, "{}: input must be 4-d (N, C, H, W), got {}", where,
                x.defined() ? x.shape().str() : std::string("an undefined tensor"));
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: input has dtype {}, expected f32, bf16 or f16", where,
                dtype_name(x.dtype()));
  PACKRAT_CHECK(out_h >= 1 && out_w >= 1, "{}: output size must be >= 1, got {}x{}", where, out_h, out_w);
  const int64_t H = x.dim(2), W = x.dim(3);
  if (H % out_h == 0 && W % out_w == 0) {  // even windows: a plain average pool
    const Pool2dOptions o{H / out_h, W / out_w, H / out_h, W / out_w, 0, 0};
    return average_pool(x, check_pool("adaptive_avgpool2d", x, o), PoolKind::AvgExcludePadding,
                        "adaptive_avgpool2d");
  }
  Tensor y = in_dtype(backend_of(x).adaptive_avgpool_forward(as_f32(x), out_h, out_w), x.dtype());
  if (!needs_grad({&x})) return y;
  const Shape xs = x.shape();
  const Layout layout = x.layout();
  record("adaptive_avgpool2d", {&x}, {&y}, {}, [xs, layout](Node&, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
    return {backend_of(grads[0]).adaptive_avgpool_backward(grads[0], xs, layout)};
  });
  return y;
}

}  // namespace packrat::ops
