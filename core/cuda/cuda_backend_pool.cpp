// CudaBackend: max / average and adaptive average pooling with packrat's kernels
// (pool_kernels.h; cuDNN's pooling returns no argmax). The kernels read and write plain NCHW;
// blocked (nChw16c / nChw8c) operands, which only the CPU backend makes, are reordered at the
// edges so that outputs come back in the layout the contract names.
#include "core/cpu/pooling.h"  // pool_workspace_dtype: the CPU's choice of argmax dtype, shared
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_handles.h"
#include "core/cuda/pool_kernels.h"

namespace packrat::cuda {

namespace {

PoolShape shape_of(const PoolGeometry& g) {
  return {g.N, g.C, g.H, g.W, g.OH, g.OW, g.KH, g.KW, g.stride_h, g.stride_w, g.pad_h, g.pad_w};
}

void check_pool_tensor(const Tensor& t, const Shape& want, const char* name, const char* primitive) {
  PACKRAT_CHECK(t.dtype() == DType::f32 && t.shape() == want, "{} ({}): {} is {}, the geometry expects {} f32",
                op_where("pool"), primitive, name, t.describe(), want.str());
}

}  // namespace

DType CudaBackend::pool_index_dtype(int64_t window) { return cpu::pool_workspace_dtype(window); }

Tensor CudaBackend::pool_forward(const Tensor& x_any, const PoolGeometry& g, PoolKind kind, Tensor* argmax) {
  make_current(index_);
  check_pool_tensor(x_any, Shape{g.N, g.C, g.H, g.W}, "input", "pool_forward");
  const Tensor x = to_layout(x_any, Layout::Plain);  // (N, C, H, W)
  const MemTag tag = TagScope::current();
  const Shape out{g.N, g.C, g.OH, g.OW};
  Tensor y = Tensor::empty(out, DType::f32, Layout::Plain, tag, device());  // (N, C, OH, OW)
  if (kind == PoolKind::Max) {
    const DType index_dtype = pool_index_dtype(g.KH * g.KW);
    Tensor index;  // (N, C, OH, OW): argmax within the window
    if (argmax) index = Tensor::empty(out, index_dtype, Layout::Plain, tag, device());
    launch_max_pool_forward(x.device_data<float>(), y.device_data<float>(), argmax ? index.raw() : nullptr,
                            index_dtype, shape_of(g));
    PACKRAT_CHECK_LAUNCH("pool_forward (max)");
    if (argmax) *argmax = to_layout(index, x_any.layout());
  } else {
    launch_avg_pool_forward(x.device_data<float>(), y.device_data<float>(), shape_of(g),
                            kind == PoolKind::AvgIncludePadding);
    PACKRAT_CHECK_LAUNCH("pool_forward (average)");
    if (argmax) *argmax = Tensor();
  }
  return to_layout(y, x_any.layout());
}

Tensor CudaBackend::pool_backward(const Tensor& gy_any, const Tensor& argmax_any, const PoolGeometry& g,
                                  PoolKind kind, Layout layout) {
  make_current(index_);
  const Shape out{g.N, g.C, g.OH, g.OW};
  check_pool_tensor(gy_any, out, "output gradient", "pool_backward");
  const Tensor gy = to_layout(gy_any, Layout::Plain);  // (N, C, OH, OW)
  Tensor dx = Tensor::empty(Shape{g.N, g.C, g.H, g.W}, DType::f32, Layout::Plain, TagScope::current(),
                            device());  // (N, C, H, W)
  if (kind == PoolKind::Max) {
    const DType index_dtype = pool_index_dtype(g.KH * g.KW);
    PACKRAT_CHECK(argmax_any.defined() && argmax_any.dtype() == index_dtype && argmax_any.shape() == out,
                  "{} (pool_backward): argmax is {}, expected {} {}", op_where("maxpool2d"),
                  argmax_any.defined() ? argmax_any.describe() : "undefined", out.str(), dtype_name(index_dtype));
    const Tensor argmax = to_layout(argmax_any, Layout::Plain);  // (N, C, OH, OW)
    launch_max_pool_backward(gy.device_data<float>(), argmax.raw(), index_dtype, dx.device_data<float>(), shape_of(g));
    PACKRAT_CHECK_LAUNCH("pool_backward (max)");
  } else {
    launch_avg_pool_backward(gy.device_data<float>(), dx.device_data<float>(), shape_of(g),
                             kind == PoolKind::AvgIncludePadding);
    PACKRAT_CHECK_LAUNCH("pool_backward (average)");
  }
  return to_layout(dx, layout);
}

Tensor CudaBackend::adaptive_avgpool_forward(const Tensor& x_any, int64_t OH, int64_t OW) {
  make_current(index_);
  PACKRAT_CHECK(x_any.rank() == 4 && x_any.dtype() == DType::f32 && OH > 0 && OW > 0,
                "{} (adaptive_avgpool_forward): input {} to ({}, {})", op_where("adaptive_avgpool2d"),
                x_any.describe(), OH, OW);
  const Tensor x = to_layout(x_any, Layout::Plain);  // (N, C, H, W)
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor y = Tensor::empty(Shape{N, C, OH, OW}, DType::f32, Layout::Plain, TagScope::current(),
                           device());  // (N, C, OH, OW)
  launch_adaptive_avg_pool_forward(x.device_data<float>(), y.device_data<float>(), N * C, H, W, OH, OW);
  PACKRAT_CHECK_LAUNCH("adaptive_avgpool_forward");
  return to_layout(y, x_any.layout());
}

Tensor CudaBackend::adaptive_avgpool_backward(const Tensor& gy_any, const Shape& x_shape, Layout layout) {
  make_current(index_);
  PACKRAT_CHECK(gy_any.rank() == 4 && x_shape.rank() == 4 && gy_any.dtype() == DType::f32 &&
                    gy_any.dim(0) == x_shape[0] && gy_any.dim(1) == x_shape[1],
                "{} (adaptive_avgpool_backward): gradient {} for an input of {}", op_where("adaptive_avgpool2d"),
                gy_any.describe(), x_shape.str());
  const Tensor gy = to_layout(gy_any, Layout::Plain);  // (N, C, OH, OW)
  Tensor dx = Tensor::empty(x_shape, DType::f32, Layout::Plain, TagScope::current(), device());  // (N, C, H, W)
  launch_adaptive_avg_pool_backward(gy.device_data<float>(), dx.device_data<float>(), x_shape[0] * x_shape[1],
                                    x_shape[2], x_shape[3], gy.dim(2), gy.dim(3));
  PACKRAT_CHECK_LAUNCH("adaptive_avgpool_backward");
  return to_layout(dx, layout);
}

}  // namespace packrat::cuda
