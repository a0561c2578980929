#include "core/cpu/conv.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/cpu/depthwise_conv.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/loops.h"
#include "core/cpu/matmul.h"
#include "core/cpu/weight_cache.h"

namespace packrat::cpu {
namespace {

dnnl::algorithm conv_algorithm() {
  return conv_algorithm_setting() == ConvAlgorithm::Direct ? dnnl::algorithm::convolution_direct
                                                      : dnnl::algorithm::convolution_auto;
}
}  // namespace

using dnnl::memory;
using tag = dnnl::memory::format_tag;


namespace {

struct ConvPlan {
  // The tensors' layouts and descriptors. The primitives' own (fwd_pd.src_desc(), ...) are the
  // same, except where plain operands would run on gemm without AVX-512 (kernel_formats): there
  // each call reorders its operands into Workspace buffers of the jit kernel's format (nChw8c)
  // and its result back out of one.
  Layout src_layout, dst_layout;
  // src, dst and the kernels' weights (wany) are in g.dtype; wplain (the parameter), wgrad (the
  // weight gradient) and bias are f32.
  memory::desc src, dst, wplain, wany, wgrad, bias;
  bool kernel_formats = false;
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  std::once_flag bd_once, bw_once;
  // The backward kernels' own src/dst layouts: the forward's, or plain where only the
  // reference kernel serves the forward's mix.
  Layout bd_src_layout, bd_dst_layout, bw_src_layout, bw_dst_layout;
  memory::desc bd_src, bw_src;  // (the output gradient's descriptor is the tensor's own: desc_of)
  dnnl::convolution_backward_data::primitive_desc bd_pd;
  dnnl::convolution_backward_data bd;
  dnnl::convolution_backward_weights::primitive_desc bw_pd;
  dnnl::convolution_backward_weights bw;
  // A depthwise weight gradient from depthwise_backward_weights instead of oneDNN's kernels
  // (own_depthwise_weight_gradient says where).
  bool own_depthwise_bw = false;
};

constexpr const char* kOwnDepthwiseImpl = "packrat:depthwise";
constexpr const char* kMatmulImpl = "packrat:matmul";  // (a pointwise convolution's weight gradient)

memory::dims weight_dims(const ConvGeometry& g) {
  if (g.groups == 1) return {g.Cout, g.Cin, g.KH, g.KW};
  return {g.groups, g.Cout / g.groups, g.Cin / g.groups, g.KH, g.KW};
}

// Descriptors with format any: the primitive picks its own format (see ConvPlan::kernel_formats).
memory::desc any_format(const memory::desc& d) { return memory::desc(d.dims(), d.data_type(), tag::any); }

void make_forward(ConvPlan& p, const ConvGeometry& g, Layout src_layout, Layout dst_layout, bool kernel_formats = false) {
  p.src_layout = src_layout;
  p.dst_layout = dst_layout;
  p.kernel_formats = kernel_formats;
  p.src = desc_for(Shape{g.N, g.Cin, g.H, g.W}, g.dtype, src_layout);
  p.dst = desc_for(Shape{g.N, g.Cout, g.OH, g.OW}, g.dtype, dst_layout);
  const memory::desc src = kernel_formats ? any_format(p.src) : p.src;
  const memory::desc dst = kernel_formats ? any_format(p.dst) : p.dst;
  dnnl::convolution_forward::desc d =
      g.has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                   conv_algorithm(), src, p.wany, p.bias, dst,
                                                   p.strides, p.dilates, p.pad_l, p.pad_r)
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                   conv_algorithm(), src, p.wany, dst,
                                                   p.strides, p.dilates, p.pad_l, p.pad_r);
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(d, dnnl_attr(), dnnl_engine());
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}
bool is_gemm_impl(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
}
bool is_reference(const ConvPlan& p) { return is_reference_impl(p.fwd_pd); }
bool is_gemm(const ConvPlan& p) { return is_gemm_impl(p.fwd_pd); }

// A plan whose kernels read and write NHWC, or false where only the reference or gemm kernels serve
// that. (An f32 plan asked for NHWC is a 16-bit convolution's weight gradient on its NHWC operands.)
// Not for 1x1 planes (squeeze-and-excitation's), where an NHWC buffer and a plain one are one
// order: oneDNN 2.6's primitive cache took such an NHWC descriptor for the plain one and ran a gemm
// kernel made for the one with the other's scratchpad (a crash: EfficientNet-B0's f32 step, then its bf16 one).
// Under Auto, not for grouped convolutions other than the depthwise ones packrat's own loop serves:
// oneDNN 2.6's bf16 grouped weight gradient on NHWC runs its slow jit_bf16 kernel (EfficientNet-B0's
// depthwise ones: 97 ms of a 250 ms bf16 step on AMX).
bool make_channels_last_forward(ConvPlan& p, const ConvGeometry& g) {
  if (g.H * g.W == 1 || g.OH * g.OW == 1) return false;
  if (g.groups > 1 && activation_layout() == ActivationLayout::Auto && !depthwise_loop_serves(g)) return false;
  make_forward(p, g, Layout::NHWC, Layout::NHWC);
  return !is_reference(p) && !is_gemm(p);
}

std::shared_ptr<ConvPlan> make_plan(const ConvGeometry& g, bool channels_last) {
  auto p = std::make_shared<ConvPlan>();
  const memory::dims wd = weight_dims(g);
  p->wplain = memory::desc(wd, memory::data_type::f32, g.groups == 1 ? tag::oihw : tag::goihw);
  p->wany = memory::desc(wd, dnnl_type(g.dtype), tag::any);
  p->wgrad = memory::desc(wd, memory::data_type::f32, tag::any);
  p->bias = g.has_bias ? memory::desc({g.Cout}, memory::data_type::f32, tag::x) : memory::desc();
  p->strides = {g.stride_h, g.stride_w};
  p->dilates = {g.dilation_h - 1, g.dilation_w - 1};
  p->pad_l = {g.pad_h, g.pad_w};
  p->pad_r = {(g.OH - 1) * g.stride_h + (g.KH - 1) * g.dilation_h + 1 - g.H - g.pad_h,
              (g.OW - 1) * g.stride_w + (g.KW - 1) * g.dilation_w + 1 - g.W - g.pad_w};
  if (channels_last && make_channels_last_forward(*p, g)) {
    p->fwd = dnnl::convolution_forward(p->fwd_pd);
    return p;
  }
  make_forward(*p, g, blocked_if_aligned(g.Cin), blocked_if_aligned(g.Cout));
  if (is_reference(*p) && (blocked_if_aligned(g.Cin) != Layout::Plain || blocked_if_aligned(g.Cout) != Layout::Plain)) {
    // Layouts that only the reference kernel serves: plain on both sides instead.
    make_forward(*p, g, Layout::Plain, Layout::Plain);
    if (is_reference(*p)) make_forward(*p, g, blocked_if_aligned(g.Cin), blocked_if_aligned(g.Cout));
  }
  if (!avx512_kernels() && is_gemm(*p)) {
    // Plain operands without AVX-512 (channels not a multiple of 8, or a mix only the reference
    // kernel serves blocked): oneDNN's plain kernels are im2col + gemm, its jit kernels want
    // nChw8c. The jit kernels with reorders at their edges, as PyTorch runs NCHW tensors: 1.5-3x
    // faster for most such convolutions on an AVX2 EPYC (docs/measurements-cpu.md, "Without AVX-512").
    make_forward(*p, g, p->src_layout, p->dst_layout, true);
    if (is_reference(*p) || is_gemm(*p)) make_forward(*p, g, p->src_layout, p->dst_layout);
  }
  if (g.dtype == DType::bf16 && amx_kernels()) {
    // AMX: oneDNN's AMX convolutions read and write channels-last, which no packrat tensor on
    // the CPU is. They run on channels-last copies at the call's edges (kernel_formats), and are
    // still 5-15x faster than the avx512_core_bf16 kernels on the blocked tensors, and 3-5x faster
    // than f32's Winograd (ResNet-18's 3x3 convolutions at batch 64, 2 cores; docs/precision.md).
    const Layout src = p->src_layout, dst = p->dst_layout;
    const bool kernel_formats = p->kernel_formats;
    make_forward(*p, g, src, dst, true);
    if (std::string(p->fwd_pd.impl_info_str()).find("amx") == std::string::npos)
      make_forward(*p, g, src, dst, kernel_formats);
  }
  p->fwd = dnnl::convolution_forward(p->fwd_pd);
  return p;
}

// channels_last: the plan's tensors are NHWC where a kernel serves them (make_plan).
std::shared_ptr<ConvPlan> plan_for(const ConvGeometry& g, bool channels_last) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<ConvPlan>> plans;
  const std::string key = g.key() + (channels_last ? ",nhwc" : "");
  std::unique_lock lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  if (plans.size() >= 512) plans.clear();  // bounded: a model has far fewer distinct convolutions
  auto p = make_plan(g, channels_last);
  plans.emplace(key, p);
  return p;
}
std::shared_ptr<ConvPlan> plan_for(const ConvGeometry& g) { return plan_for(g, channels_last_convolutions(g.dtype)); }

// Creates a backward primitive descriptor with the forward's layouts; without AVX-512, where those
// have only gemm or the reference kernel, with the jit kernel's own formats (copies at the call's
// edges, as kernel_formats); else with plain src and dst when the forward's layouts have only the
// reference kernel and plain ones do not.
// src_dtype: the src side's (the data gradient's f32, or x's g.dtype).
template <typename PD, typename MakeDesc>
PD backward_pd(const ConvGeometry& g, const ConvPlan& p, MakeDesc make_desc, DType src_dtype, Layout& src_layout,
               Layout& dst_layout, memory::desc& src) {
  src_layout = p.src_layout, dst_layout = p.dst_layout;
  memory::desc dst = p.dst;
  src = desc_for(Shape{g.N, g.Cin, g.H, g.W}, src_dtype, p.src_layout);
  if (p.kernel_formats) return PD(make_desc(any_format(src), any_format(dst)), dnnl_attr(), dnnl_engine(), p.fwd_pd);
  PD pd(make_desc(src, dst), dnnl_attr(), dnnl_engine(), p.fwd_pd);
  if (!avx512_kernels() && (is_gemm_impl(pd) || is_reference_impl(pd))) {
    // As make_plan does for the forward: the jit kernel on copies in its own format, not gemm or
    // the reference (without AVX-512: a 3-channel image's data gradient beside an nChw8c output
    // gradient).
    PD jit(make_desc(any_format(src), any_format(dst)), dnnl_attr(), dnnl_engine(), p.fwd_pd);
    if (!is_reference_impl(jit) && !is_gemm_impl(jit)) return jit;
  }
  if (!is_reference_impl(pd) || (src_layout == Layout::Plain && dst_layout == Layout::Plain)) return pd;
  const memory::desc psrc = desc_for(Shape{g.N, g.Cin, g.H, g.W}, src_dtype, Layout::Plain);
  const memory::desc pdst = desc_for(Shape{g.N, g.Cout, g.OH, g.OW}, g.dtype, Layout::Plain);
  PD plain(make_desc(psrc, pdst), dnnl_attr(), dnnl_engine(), p.fwd_pd);
  if (is_reference_impl(plain)) return pd;
  src_layout = dst_layout = Layout::Plain, src = psrc;
  return plain;
}

ConvPlan& backward_data_plan(const ConvGeometry& g, const std::shared_ptr<ConvPlan>& p) {
  std::call_once(p->bd_once, [&] {
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
      return dnnl::convolution_backward_data::desc(conv_algorithm(), src, p->wany, dst,
                                                   p->strides, p->dilates, p->pad_l, p->pad_r);
    };
    p->bd_pd = backward_pd<dnnl::convolution_backward_data::primitive_desc>(g, *p, make, DType::f32, p->bd_src_layout,
                                                                            p->bd_dst_layout, p->bd_src);
    p->bd = dnnl::convolution_backward_data(p->bd_pd);
  });
  return *p;
}

// Whether a depthwise weight gradient comes from packrat's loop: wherever it serves the geometry and
// reads the operands as they lie (nChw16c or NHWC), and wherever oneDNN has no jit_dw kernel for it.
// It is faster than jit_dw on most of EfficientNet-B0's (BM_DepthwiseWeightGradient), and reads
// bf16 operands as they are on every CPU (oneDNN's strided bf16 kernels stall without AMX, and NHWC
// ones run its slow jit_bf16 kernel). Without AVX-512 the operands are nChw8c: jit_dw, where it serves.
bool own_depthwise_weight_gradient(const ConvGeometry& g, const ConvPlan& p) {
  if (!depthwise_loop_serves(g)) return false;
  const bool walkable = p.src_layout == Layout::NHWC || p.src_layout == Layout::nChw16c;
  return walkable || std::string(p.bw_pd.impl_info_str()).rfind("jit_dw", 0) != 0;
}

ConvPlan& backward_weights_plan(const ConvGeometry& g, const std::shared_ptr<ConvPlan>& p) {
  std::call_once(p->bw_once, [&] {
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
      return g.has_bias ? dnnl::convolution_backward_weights::desc(conv_algorithm(), src, p->wgrad, p->bias, dst,
                                                                   p->strides, p->dilates, p->pad_l, p->pad_r)
                        : dnnl::convolution_backward_weights::desc(conv_algorithm(), src, p->wgrad, dst, p->strides,
                                                                   p->dilates, p->pad_l, p->pad_r);
    };
    p->bw_pd = backward_pd<dnnl::convolution_backward_weights::primitive_desc>(g, *p, make, g.dtype, p->bw_src_layout,
                                                                               p->bw_dst_layout, p->bw_src);
    p->own_depthwise_bw = own_depthwise_weight_gradient(g, *p);
    if (!p->own_depthwise_bw) p->bw = dnnl::convolution_backward_weights(p->bw_pd);
  });
  return *p;
}

// The kernel's view of input t (laid out as tensor_desc): t's buffer where the kernel reads that
// format, else a Workspace copy in the kernel's format, held by `copy` (ConvPlan::kernel_formats).
memory kernel_input(const Tensor& t, const memory::desc& tensor_desc, const memory::desc& kernel_desc, Tensor& copy) {
  if (kernel_desc == tensor_desc) return memory_of(t, tensor_desc);
  copy = reorder_into_buffer(t, tensor_desc, kernel_desc, MemTag::Workspace);
  return memory(kernel_desc, dnnl_engine(), copy.raw());
}

// Where the kernel writes `out` (laid out as tensor_desc): out's buffer, or a Workspace buffer in the
// kernel's format, held by `copy`, that finish_output reorders into out.
memory kernel_output(const Tensor& out, const memory::desc& tensor_desc, const memory::desc& kernel_desc, Tensor& copy) {
  if (kernel_desc == tensor_desc) return memory_of(out, tensor_desc);
  copy = Tensor::empty(Shape{static_cast<int64_t>((kernel_desc.get_size() + 3) / 4)}, DType::f32, Layout::Plain,
                       MemTag::Workspace, Device::cpu());  // (kernel format's floats,)
  return memory(kernel_desc, dnnl_engine(), copy.raw());
}
void finish_output(const Tensor& copy, const memory::desc& kernel_desc, Tensor& out) {
  if (copy.defined()) reorder_from_buffer(copy, kernel_desc, out);
}

// Whether a (N, C, H, W) tensor's buffer is the (N*H*W, C) row-major matrix of its pixels: NHWC,
// or any layout of 1x1 planes (blocked ones hold no padding: layout.h).
bool pixel_rows(const Tensor& t) { return t.layout() == Layout::NHWC || t.shape()[2] * t.shape()[3] == 1; }

// Whether the weight gradient of a pointwise convolution is one matmul, dW (Cout, Cin) = gy^T x over
// the (pixels, channels) matrices of its operands: stride 1, no padding, and the operands' buffers
// those matrices (NHWC activations, or squeeze-and-excitation's 1x1 planes). oneDNN's convolution
// kernels for it were slower: on 1x1 planes its gemm convolution ran one tiny gemm per sample
// (0.83 ms for EfficientNet-B0's 28 -> 672 at batch 32), and on AMX its bf16 1x1 kernel ran at
// half the speed of f32's jit_1x1 on the values converted (itself 14 ms of the bf16 step against
// the matmul's 8.5, with no conversion).
bool weight_gradient_as_matmul(const ConvGeometry& g) {
  if (g.KH * g.KW != 1 || g.groups != 1 || g.stride_h != 1 || g.stride_w != 1 || g.pad_h != 0 || g.pad_w != 0)
    return false;
  return g.H * g.W == 1 || plan_for(g)->src_layout == Layout::NHWC;
}

void matmul_weight_gradient(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb) {
  const int64_t pixels = g.N * g.H * g.W;
  gw = matmul(gy, true, x, false, 1, g.Cout, pixels, g.Cin, Tensor(), Shape{g.Cout, g.Cin, 1, 1}, DType::f32);
  if (g.has_bias) {
    Tensor gy32;  // (pixels, Cout) rows in f32
    {
      TagScope copy(MemTag::Workspace);
      gy32 = gy.to(DType::f32);
    }
    gb = column_sums(gy32, pixels, g.Cout);  // (Cout)
  }
}

}  // namespace

ConvLayouts conv_layouts(const ConvGeometry& g) {
  auto p = plan_for(g);
  return ConvLayouts{p->src_layout, p->dst_layout, p->fwd_pd.impl_info_str(), p->fwd_pd.weights_desc() == p->wplain};
}

std::pair<std::string, std::string> conv_backward_implementations(const ConvGeometry& g) {
  auto p = plan_for(g);
  const ConvPlan& bw = backward_weights_plan(g, p);
  const std::string weights = weight_gradient_as_matmul(g) ? kMatmulImpl
                              : bw.own_depthwise_bw         ? kOwnDepthwiseImpl
                                                            : bw.bw_pd.impl_info_str();
  return {backward_data_plan(g, p).bd_pd.impl_info_str(), weights};
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool keep_weights) {
  auto plan = plan_for(g);
  const Tensor src = to_layout(x, plan->src_layout);
  const Tensor wbuf = weights_as(w, plan->wplain, plan->fwd_pd.weights_desc(), keep_weights);
  Tensor y = empty_cpu(Shape{g.N, g.Cout, g.OH, g.OW}, g.dtype, plan->dst_layout);  // (N, Cout, OH, OW)
  Tensor src_copy, dst_copy;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, kernel_input(src, plan->src, plan->fwd_pd.src_desc(), src_copy)},
                                       {DNNL_ARG_WEIGHTS, memory_of(wbuf, plan->fwd_pd.weights_desc())},
                                       {DNNL_ARG_DST, kernel_output(y, plan->dst, plan->fwd_pd.dst_desc(), dst_copy)}};
  if (g.has_bias) args.emplace(DNNL_ARG_BIAS, memory_of(b, plan->bias));
  execute(plan->fwd, plan->fwd_pd, std::move(args));
  finish_output(dst_copy, plan->fwd_pd.dst_desc(), y);
  return y;
}

namespace {
// Whether the weight gradient for g runs oneDNN's f32 kernel on the 16-bit values (see
// conv_backward_weights).
bool f32_weight_gradient(const ConvGeometry& g) {
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  const bool pointwise = g.KH * g.KW == 1 && g.groups == 1;
  if (g.dtype == DType::f32) return false;
  if (g.groups > 1 && backward_weights_plan(g, plan_for(g)).own_depthwise_bw) return false;  // it reads 16 bits
  if (weight_gradient_as_matmul(g)) return false;
  return amx_kernels() ? pointwise || (strided && g.groups > 1) : strided;
}

// The output gradient as the kernel reads it: gy itself when it is the channels-last copy of
// conv_grad_output, else gy in `layout`.
Tensor diff_dst_as(const Tensor& gy, Layout layout) { return gy.layout() == Layout::NHWC ? gy : to_layout(gy, layout); }
}  // namespace

Tensor conv_grad_output(const Tensor& gy, const ConvGeometry& g) {
  if (gy.dtype() != DType::f32 || g.dtype == DType::f32) return gy.to(g.dtype);
  // A blocked gy converted into a channels-last copy in one oneDNN reorder.
  auto channels_last_copy = [&] {
    Tensor out = Tensor::empty(gy.shape(), g.dtype, Layout::NHWC, MemTag::Workspace,
                               Device::cpu());  // (N, Cout, OH, OW) channels-last
    reorder(memory_of(gy), memory_of(out));
    return out;
  };
  auto plan = plan_for(g);
  if (plan->dst_layout == Layout::NHWC && gy.layout() == Layout::NHWC) {
    // Converted where it lies: Tensor::to's SIMD lanes are 1.2x as fast as oneDNN's reorder
    // (BM_Convert).
    TagScope copy(MemTag::Workspace);
    return gy.to(g.dtype);
  }
  if (!plan->kernel_formats || f32_weight_gradient(g) || backward_weights_plan(g, plan).own_depthwise_bw)
    return gy.to(g.dtype);
  const memory::desc nhwc = desc_for(Shape{g.N, g.Cout, g.OH, g.OW}, g.dtype, Layout::NHWC);
  if (backward_data_plan(g, plan).bd_pd.diff_dst_desc() != nhwc || plan->bw_pd.diff_dst_desc() != nhwc)
    return gy.to(g.dtype);
  return channels_last_copy();
}

Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) {
  auto plan = plan_for(g);
  ConvPlan& p = backward_data_plan(g, plan);
  const Tensor diff_dst = diff_dst_as(gy, p.bd_dst_layout);
  const Tensor wbuf = weights_as(w, p.wplain, p.bd_pd.weights_desc(), false);
  Tensor dx = empty_cpu(Shape{g.N, g.Cin, g.H, g.W}, DType::f32, p.bd_src_layout);  // (N, Cin, H, W)
  Tensor dst_copy, src_copy;
  execute(p.bd, p.bd_pd,
          {{DNNL_ARG_DIFF_DST, kernel_input(diff_dst, desc_of(diff_dst), p.bd_pd.diff_dst_desc(), dst_copy)},
           {DNNL_ARG_WEIGHTS, memory_of(wbuf, p.bd_pd.weights_desc())},
           {DNNL_ARG_DIFF_SRC, kernel_output(dx, p.bd_src, p.bd_pd.diff_src_desc(), src_copy)}});
  dst_copy = Tensor();  // the gradient's copy goes before dx's is reordered out
  finish_output(src_copy, p.bd_pd.diff_src_desc(), dx);
  return dx;
}

DType weight_gradient_dtype(const ConvGeometry& g) { return f32_weight_gradient(g) ? DType::f32 : g.dtype; }

namespace {
// The weight gradient on `plan`'s kernels.
void backward_weights_with(const std::shared_ptr<ConvPlan>& plan, const Tensor& x, const Tensor& gy,
                           const ConvGeometry& g, Tensor& gw, Tensor& gb) {
  ConvPlan& p = backward_weights_plan(g, plan);
  if (p.own_depthwise_bw) {
    // Its loop walks 16-channel slices of nChw16c or NHWC tensors, f32 or bf16, as they lie; other
    // layouts (nChw8c without AVX-512, plain) go through nChw16c Workspace copies.
    auto walkable = [](const Tensor& t) {
      if (t.layout() == Layout::NHWC || t.layout() == Layout::nChw16c) return t;
      TagScope copies(MemTag::Workspace);
      return to_layout(t, Layout::nChw16c);
    };
    depthwise_backward_weights(walkable(x), walkable(gy), g, gw, gb);
    return;
  }
  const Tensor src = to_layout(x, p.bw_src_layout);
  const Tensor diff_dst = diff_dst_as(gy, p.bw_dst_layout);
  gw = empty_cpu(Shape{g.Cout, g.Cin / g.groups, g.KH, g.KW});  // (Cout, Cin/groups, KH, KW) plain OIHW
  const memory::desc dw_desc = p.bw_pd.diff_weights_desc();
  const bool direct = dw_desc == p.wplain;
  Tensor dw_buf = direct ? gw
                         : Tensor::empty(Shape{static_cast<int64_t>((dw_desc.get_size() + 3) / 4)}, DType::f32,
                                         Layout::Plain, MemTag::Workspace, Device::cpu());  // blocked diff weights
  Tensor src_copy, dst_copy;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, kernel_input(src, p.bw_src, p.bw_pd.src_desc(), src_copy)},
                                       {DNNL_ARG_DIFF_DST, kernel_input(diff_dst, desc_of(diff_dst), p.bw_pd.diff_dst_desc(), dst_copy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, memory_of(dw_buf, dw_desc)}};
  if (g.has_bias) {
    gb = empty_cpu(Shape{g.Cout});  // (Cout)
    args.emplace(DNNL_ARG_DIFF_BIAS, memory_of(gb, p.bias));
  }
  execute(p.bw, p.bw_pd, std::move(args));
  if (!direct) reorder(memory(dw_desc, dnnl_engine(), dw_buf.raw()), memory(p.wplain, dnnl_engine(), gw.raw()));
}

}  // namespace

void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb) {
  if (weight_gradient_as_matmul(g) && pixel_rows(x) && pixel_rows(gy)) {
    matmul_weight_gradient(x, gy, g, gw, gb);
    return;
  }
  if (f32_weight_gradient(g)) {
    // f32 on the bf16 values instead of oneDNN 2.6's bf16 weight gradient:
    // - of a strided convolution without AMX, whose avx512_core_bf16 kernel synchronises its
    //   threads so often that on a machine shared with other jobs it ran 20-1500x slower than
    //   f32's (ResNet-20's two stride-2 convolutions: 480-2190 ms a call against f32's 24 ms, the
    //   bf16 kernel's own 1.4 ms when it got both cores; docs/precision.md). AMX's kernel has no
    //   such stall: ResNet-18's bf16 step 1.055x faster with its three strided 3x3 ones on AMX
    //   (0.92x beside a busy process);
    // - of a 1x1 convolution on AMX, where f32's jit_1x1 kernel is about twice as fast as the AMX
    //   one (EfficientNet-B0's bf16 step 1.12x faster; docs/precision.md).
    ConvGeometry f32 = g;
    f32.dtype = DType::f32;
    Tensor xf, gyf;
    {
      TagScope copies(MemTag::Workspace);
      xf = x.to(DType::f32);
      gyf = gy.to(DType::f32);
    }
    conv_backward_weights(xf, gyf, f32, gw, gb);  // gw, gb under the caller's tag
    return;
  }
  // An NHWC input (channels-last activations) is read by kernels for NHWC, not reordered: also an f32
  // weight gradient of a 16-bit convolution (weight_gradient_dtype), whose own geometry is f32.
  backward_weights_with(plan_for(g, channels_last_convolutions(g.dtype) || x.layout() == Layout::NHWC), x, gy, g, gw,
                        gb);
}

}  // namespace packrat::cpu
