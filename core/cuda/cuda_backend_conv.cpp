// CudaBackend: convolution on cuDNN's legacy API (conv_plans.h), in activation_layout():
// NHWC by default (inputs of another layout are reordered, outputs are NHWC; weights are kept as
// KRSC parameters, conv_weight_layout(), and the weight gradient is written so: a plain OIHW
// weight is still read, through a KRSC Workspace copy for each call), or plain NCHW. The bias is added, and its gradient summed, by packrat's kernels
// (conv_kernels.h). Workspaces come from packrat's allocator under the Workspace tag and are
// freed when the call returns (stream order keeps a reused block safe: every later kernel runs
// after this one). In g.dtype: f32, or bf16 / f16 under autocast, where x, y and gy are 16-bit and
// cuDNN computes in f32 on tensor cores; the f32 weight is read through a 16-bit Workspace copy,
// and cuDNN's 16-bit dx and gw (it writes them in the operands' dtype) come back as f32, as the
// contract says (ConvGeometry::dtype); the bias is added and summed in f32.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "core/cuda/conv_kernels.h"
#include "core/cuda/conv_plans.h"
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_check.h"
#include "core/cuda/dnn_handles.h"

namespace packrat::cuda {

namespace {

const float kOne = 1.0f, kZero = 0.0f;

// A workspace of `bytes` on `device` (undefined when 0), counted by the allocator.
Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DType::u8, Layout::Plain, MemTag::Workspace, device);
}
void* data_or_null(const Tensor& t) { return t.defined() ? t.raw() : nullptr; }

void check_conv_operand(const Tensor& t, const Shape& want, const char* name, const ConvGeometry& g, DType dtype) {
  PACKRAT_CHECK(t.dtype() == dtype && t.shape() == want, "{} on CUDA: {} is {}, geometry {} expects {} {}",
                op_where("conv2d"), name, t.describe(), g.key(), want.str(), dtype_name(dtype));
}

// t in `dtype`: t itself, or a Workspace copy (an f32 weight cuDNN reads in bf16, a bf16 output
// gradient the bias sums read in f32).
Tensor as_workspace(const Tensor& t, DType dtype) {
  const TagScope scratch(MemTag::Workspace);
  return t.to(dtype);
}

Shape input_shape(const ConvGeometry& g) { return Shape{g.N, g.Cin, g.H, g.W}; }
Shape output_shape(const ConvGeometry& g) { return Shape{g.N, g.Cout, g.OH, g.OW}; }
Shape weight_shape(const ConvGeometry& g) { return Shape{g.Cout, g.Cin / g.groups, g.KH, g.KW}; }

// The weight as the plan's filter descriptor reads it: w itself when it is in the plan's layout
// (a parameter made by Conv2d on this backend), else a Workspace copy in that layout.
Tensor conv_filter(const Tensor& w, Layout layout) {
  const TagScope scratch(MemTag::Workspace);
  return w.to_layout(layout);  // (Cout, Cin / groups, KH, KW), as (Cout, KH, KW, Cin / groups) in memory for NHWC
}

}  // namespace

Layout CudaBackend::conv_weight_layout() const { return activation_layout(); }

// cuDNN's 16-bit convolutions run with PACKRAT_CUDA_CONV=half, until a GPU has run their tests and
// timed them against the default (scripts/device_check.sh's EXPERIMENT; docs/precision.md): by
// default bf16 and f16 convolutions compute at the kernels' edges, on TF32 tensor cores.
bool CudaBackend::conv_computes_in(DType dtype) const {
  static const bool half = [] {
    const char* v = std::getenv("PACKRAT_CUDA_CONV");
    const std::string name = v ? v : "f32";
    PACKRAT_CHECK(name == "f32" || name == "half", "PACKRAT_CUDA_CONV={}: expected f32 or half", name);
    return name == "half";
  }();
  return dtype == DType::f32 || (half && (dtype == DType::bf16 || dtype == DType::f16));
}

// The layout cuDNN reads: x itself when already in it.
Tensor CudaBackend::conv_input(const Tensor& x, const ConvGeometry&) { return to_layout(x, activation_layout()); }

Tensor CudaBackend::conv_forward(const Tensor& x_any, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool) {
  make_current(index_);
  const Layout layout = activation_layout();
  const Tensor x = to_layout(x_any, layout);  // (N, Cin, H, W)
  check_conv_operand(x, input_shape(g), "input", g, g.dtype);
  check_conv_operand(w, weight_shape(g), "weight", g, DType::f32);
  if (g.has_bias) check_conv_operand(b, Shape{g.Cout}, "bias", g, DType::f32);
  Tensor y = Tensor::empty(output_shape(g), g.dtype, layout, TagScope::current(), device());  // (N, Cout, OH, OW)
  if (y.numel() == 0) return y;
  const auto plan = conv_plan(index_, g, layout);
  cudnnHandle_t h = cudnn_handle(index_);
  const ConvChoice& c = plan->forward(h);
  {
    const Tensor filter = as_workspace(conv_filter(w, layout), g.dtype);
    const Tensor ws = workspace(c.workspace, device());
    PACKRAT_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, plan->x, x.raw(), plan->w, filter.raw(), plan->conv,
                                                static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), data_or_null(ws),
                                                c.workspace, &kZero, plan->y, y.raw()),
                        fmt::format("{}, forward algorithm {}", plan->what(), c.algo));
  }
  if (g.has_bias) {  // in f32: a 16-bit y through an f32 copy, rounded once after the bias
    Tensor y32 = as_workspace(y, DType::f32);
    const ChannelView v = channel_view(g.N, g.Cout, g.OH * g.OW, layout == Layout::NHWC);  // the bias kernels' view
    launch_add_channel_bias(y32.device_data<float>(), b.device_data<float>(), v.N, v.C, v.HW);
    PACKRAT_CHECK_LAUNCH("conv_forward (bias)");
    if (y.dtype() != DType::f32) convert(y32, y);
  }
  return y;
}

// dx = beta dx + the input gradient (cuDNN's blend: beta 0 overwrites, 1 adds), dx (N, Cin, H, W)
// in activation_layout().
void CudaBackend::run_conv_backward_data(const Tensor& gy_any, const Tensor& w, const ConvGeometry& g, Tensor& dx,
                                         float beta) {
  const Layout layout = activation_layout();
  const Tensor gy = to_layout(gy_any, layout);  // (N, Cout, OH, OW)
  check_conv_operand(gy, output_shape(g), "output gradient", g, g.dtype);
  check_conv_operand(w, weight_shape(g), "weight", g, DType::f32);
  check_conv_operand(dx, input_shape(g), "input gradient", g, g.dtype);
  if (dx.numel() == 0) return;
  if (gy.numel() == 0) {
    if (beta == 0.0f) fill(dx, 0.0);
    return;
  }
  const auto plan = conv_plan(index_, g, layout);
  cudnnHandle_t h = cudnn_handle(index_);
  const ConvChoice& c = plan->backward_data(h);
  const Tensor filter = as_workspace(conv_filter(w, layout), g.dtype);
  const Tensor ws = workspace(c.workspace, device());
  PACKRAT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, plan->w, filter.raw(), plan->y, gy.raw(), plan->conv,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                                   data_or_null(ws), c.workspace, &beta, plan->x, dx.raw()),
                      fmt::format("{}, backward-data algorithm {}", plan->what(), c.algo));
}

Tensor CudaBackend::conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) {
  make_current(index_);
  // (N, Cin, H, W): cuDNN writes it in g.dtype, a Workspace one when that is 16-bit
  Tensor dx = Tensor::empty(input_shape(g), g.dtype, activation_layout(),
                            g.dtype == DType::f32 ? TagScope::current() : MemTag::Workspace, device());
  run_conv_backward_data(gy, w, g, dx, 0.0f);
  return g.dtype == DType::f32 ? dx : dx.to(DType::f32);
}

Tensor CudaBackend::conv_backward_data_into(const Tensor& gy, const Tensor& w, const ConvGeometry& g, Tensor& into) {
  make_current(index_);
  // cuDNN blends into its own output layout and dtype only; another one takes the separate add.
  if (into.layout() != activation_layout() || into.dtype() != DType::f32 || g.dtype != DType::f32 ||
      into.device() != device())
    return Backend::conv_backward_data_into(gy, w, g, into);
  run_conv_backward_data(gy, w, g, into, 1.0f);
  return into;
}

void CudaBackend::conv_backward_weights(const Tensor& x_any, const Tensor& gy_any, const ConvGeometry& g, Tensor& gw,
                                        Tensor& gb) {
  make_current(index_);
  const Layout layout = activation_layout();
  const Tensor x = to_layout(x_any, layout);    // (N, Cin, H, W)
  const Tensor gy = to_layout(gy_any, layout);  // (N, Cout, OH, OW)
  check_conv_operand(x, input_shape(g), "input", g, g.dtype);
  check_conv_operand(gy, output_shape(g), "output gradient", g, g.dtype);
  const MemTag tag = TagScope::current();
  if (g.has_bias) gb = Tensor::empty(Shape{g.Cout}, DType::f32, Layout::Plain, tag, device());  // (Cout)
  // In the filter's format, the weight parameter's own (conv_weight_layout()): no reorder.
  gw = Tensor::empty(weight_shape(g), DType::f32, layout, tag, device());  // (Cout, Cin/groups, KH, KW)
  if (x.numel() == 0 || gy.numel() == 0) {  // nothing to sum over
    fill(gw, 0.0);
    if (g.has_bias) fill(gb, 0.0);
    return;
  }
  // cuDNN writes the weight gradient in g.dtype: a 16-bit one to a Workspace tensor, converted after.
  Tensor gw_kernel = g.dtype == DType::f32
                         ? gw
                         : Tensor::empty(weight_shape(g), g.dtype, layout, MemTag::Workspace, device());
  const auto plan = conv_plan(index_, g, layout);
  cudnnHandle_t h = cudnn_handle(index_);
  const ConvChoice& c = plan->backward_filter(h);
  {
    const Tensor ws = workspace(c.workspace, device());
    PACKRAT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &kOne, plan->x, x.raw(), plan->y, gy.raw(), plan->conv,
                                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                                       data_or_null(ws), c.workspace, &kZero, plan->w,
                                                       gw_kernel.raw()),
                        fmt::format("{}, backward-filter algorithm {}", plan->what(), c.algo));
  }
  if (g.dtype != DType::f32) convert(gw_kernel, gw);
  if (g.has_bias) {
    const Tensor gy32 = as_workspace(gy, DType::f32);  // the sums read f32
    const ChannelView v = channel_view(g.N, g.Cout, g.OH * g.OW, layout == Layout::NHWC);
    const int splits = channel_splits(v.N * v.HW, v.HW);
    const Tensor partial = Tensor::empty(Shape{g.Cout * splits * 2}, DType::f64, Layout::Plain, MemTag::Workspace,
                                         device());  // (Cout, splits, 2)
    launch_channel_sums(gy32.device_data<float>(), v.N, v.C, v.HW, partial.device_data<double>(), splits,
                        gb.device_data<float>());
    PACKRAT_CHECK_LAUNCH("conv_backward_weights (bias)");
  }
}

}  // namespace packrat::cuda
