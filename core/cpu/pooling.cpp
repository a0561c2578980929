#include "core/cpu/pooling.h"

#include "core/cpu/dnnl_context.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

using dnnl::memory;

namespace {
dnnl::algorithm algorithm_of(PoolKind k) {
  switch (k) {
    case PoolKind::Max: return dnnl::algorithm::pooling_max;
    case PoolKind::AvgIncludePadding: return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::AvgExcludePadding: return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return dnnl::algorithm::pooling_max;
}

// dtype: x's and y's (the backward's gradients are f32: its hint is the f32 forward).
dnnl::pooling_forward::desc forward_desc(const PoolGeometry& g, PoolKind kind, Layout layout, dnnl::prop_kind prop,
                                         DType dtype = DType::f32) {
  const memory::desc src = desc_for(Shape{g.N, g.C, g.H, g.W}, dtype, layout);
  const memory::desc dst = desc_for(Shape{g.N, g.C, g.OH, g.OW}, dtype, layout);
  const memory::dims pad_r = {(g.OH - 1) * g.stride_h + g.KH - g.H - g.pad_h,
                              (g.OW - 1) * g.stride_w + g.KW - g.W - g.pad_w};
  return dnnl::pooling_forward::desc(prop, algorithm_of(kind), src, dst, {g.stride_h, g.stride_w}, {g.KH, g.KW},
                                     {g.pad_h, g.pad_w}, pad_r);
}
}  // namespace

DType pool_workspace_dtype(int64_t window) { return window < 256 ? DType::u8 : DType::i32; }

Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* workspace) {
  const Layout layout = x.layout();
  const auto prop = workspace ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const dnnl::pooling_forward::primitive_desc pd(forward_desc(g, kind, layout, prop, x.dtype()), dnnl_attr(),
                                                 dnnl_engine());
  Tensor y = empty_cpu(Shape{g.N, g.C, g.OH, g.OW}, x.dtype(), layout);  // (N, C, OH, OW), x's layout and dtype
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x)}, {DNNL_ARG_DST, memory_of(y)}};
  if (workspace) {
    const memory::desc wd = pd.workspace_desc();
    const DType wdt = pool_workspace_dtype(g.KH * g.KW);
    *workspace = empty_cpu(y.shape(), wdt, layout);  // (N, C, OH, OW) argmax within the window
    PACKRAT_CHECK(wd == desc_of(*workspace), "maxpool2d: oneDNN's workspace is not laid out like the output ({})",
                  workspace->describe());
    args.emplace(DNNL_ARG_WORKSPACE, memory_of(*workspace));
  }
  execute(dnnl::pooling_forward(pd), pd, std::move(args));
  return y;
}

Tensor pool_backward(const Tensor& gy, const Tensor& workspace, const PoolGeometry& g, PoolKind kind, Layout layout) {
  const auto hint_prop = kind == PoolKind::Max ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const dnnl::pooling_forward::primitive_desc hint(forward_desc(g, kind, layout, hint_prop), dnnl_attr(),
                                                   dnnl_engine());
  const memory::desc src = desc_for(Shape{g.N, g.C, g.H, g.W}, DType::f32, layout);
  const memory::desc dst = desc_for(Shape{g.N, g.C, g.OH, g.OW}, DType::f32, layout);
  const memory::dims pad_r = {(g.OH - 1) * g.stride_h + g.KH - g.H - g.pad_h,
                              (g.OW - 1) * g.stride_w + g.KW - g.W - g.pad_w};
  const dnnl::pooling_backward::desc d(algorithm_of(kind), src, dst, {g.stride_h, g.stride_w}, {g.KH, g.KW},
                                       {g.pad_h, g.pad_w}, pad_r);
  const dnnl::pooling_backward::primitive_desc pd(d, dnnl_attr(), dnnl_engine(), hint);
  const Tensor diff_dst = to_layout(gy, layout);
  Tensor dx = empty_cpu(Shape{g.N, g.C, g.H, g.W}, DType::f32, layout);  // (N, C, H, W)
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, memory_of(diff_dst)}, {DNNL_ARG_DIFF_SRC, memory_of(dx)}};
  if (kind == PoolKind::Max) args.emplace(DNNL_ARG_WORKSPACE, memory_of(workspace));
  execute(dnnl::pooling_backward(pd), pd, std::move(args));
  return dx;
}

}  // namespace packrat::cpu
