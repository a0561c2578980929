#include "core/cpu/batchnorm.h"

#include <atomic>

#include "core/cpu/dnnl_context.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

using dnnl::memory;
using bn_fwd = dnnl::batch_normalization_forward;
using bn_bwd = dnnl::batch_normalization_backward;

namespace {
dnnl::normalization_flags flags_for(bool scale, bool shift, bool global_stats) {
  auto f = dnnl::normalization_flags::none;
  if (scale) f = f | dnnl::normalization_flags::use_scale;
  if (shift) f = f | dnnl::normalization_flags::use_shift;
  if (global_stats) f = f | dnnl::normalization_flags::use_global_stats;
  return f;
}

memory::desc channel_desc(int64_t C) { return memory::desc({C}, memory::data_type::f32, memory::format_tag::x); }

bn_fwd::primitive_desc forward_pd(const memory::desc& data, float eps, dnnl::normalization_flags flags,
                                  dnnl::prop_kind kind) {
  return bn_fwd::primitive_desc(bn_fwd::desc(kind, data, eps, flags), dnnl_attr(), dnnl_engine());
}

void add_affine(std::unordered_map<int, memory>& args, const Tensor& weight, const Tensor& bias, int64_t C) {
  if (weight.defined()) args.emplace(DNNL_ARG_SCALE, memory_of(weight, channel_desc(C)));
  if (bias.defined()) args.emplace(DNNL_ARG_SHIFT, memory_of(bias, channel_desc(C)));
}

std::atomic<BatchNormKernel> g_kernel{BatchNormKernel::Loops};
bool use_loops() { return g_kernel.load() == BatchNormKernel::Loops; }
}  // namespace

void set_batchnorm_kernel(BatchNormKernel k) { g_kernel = k; }
BatchNormKernel batchnorm_kernel() { return g_kernel.load(); }

void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                Tensor& mean, Tensor& var) {
  if (use_loops()) return batchnorm_forward_training_loops(x, weight, bias, eps, y, mean, var);
  if (x.dtype() != DType::f32) {  // oneDNN's kernel here is f32 only: through an f32 copy
    Tensor yf;
    batchnorm_forward_training(x.to(DType::f32), weight, bias, eps, yf, mean, var);
    y = yf.to(x.dtype());
    return;
  }
  const int64_t C = x.dim(1);
  const memory::desc data = desc_of(x);
  auto pd = forward_pd(data, eps, flags_for(weight.defined(), bias.defined(), false), dnnl::prop_kind::forward_training);
  y = Tensor::empty_like(x);            // (N, C, H, W), x's layout
  mean = empty_cpu(Shape{C});           // (C)
  var = empty_cpu(Shape{C});            // (C), biased
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x, data)},
                                       {DNNL_ARG_DST, memory_of(y, data)},
                                       {DNNL_ARG_MEAN, memory_of(mean, channel_desc(C))},
                                       {DNNL_ARG_VARIANCE, memory_of(var, channel_desc(C))}};
  add_affine(args, weight, bias, C);
  execute(bn_fwd(pd), pd, std::move(args));
}

Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                   const Tensor& var, float eps) {
  if (use_loops()) return batchnorm_forward_inference_loops(x, weight, bias, mean, var, eps);
  if (x.dtype() != DType::f32)
    return batchnorm_forward_inference(x.to(DType::f32), weight, bias, mean, var, eps).to(x.dtype());
  const int64_t C = x.dim(1);
  const memory::desc data = desc_of(x);
  auto pd = forward_pd(data, eps, flags_for(weight.defined(), bias.defined(), true), dnnl::prop_kind::forward_inference);
  Tensor y = Tensor::empty_like(x);  // (N, C, H, W), x's layout
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x, data)},
                                       {DNNL_ARG_DST, memory_of(y, data)},
                                       {DNNL_ARG_MEAN, memory_of(mean, channel_desc(C))},
                                       {DNNL_ARG_VARIANCE, memory_of(var, channel_desc(C))}};
  add_affine(args, weight, bias, C);
  execute(bn_fwd(pd), pd, std::move(args));
  return y;
}

void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                        const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  if (use_loops())
    return batchnorm_backward_loops(x, gy, weight, has_bias, mean, var, eps, global_stats, dx, dweight, dbias);
  if (x.dtype() != DType::f32)
    return batchnorm_backward(x.to(DType::f32), gy, weight, has_bias, mean, var, eps, global_stats, dx, dweight, dbias);
  const int64_t C = x.dim(1);
  const memory::desc data = desc_of(x);
  const Tensor diff_dst = to_layout(gy, x.layout());
  const auto flags = flags_for(weight.defined(), has_bias, global_stats);
  auto hint = forward_pd(data, eps, flags, dnnl::prop_kind::forward_training);
  const bool affine = weight.defined() || has_bias;
  const auto kind = affine ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data;
  bn_bwd::primitive_desc pd(bn_bwd::desc(kind, data, data, eps, flags), dnnl_attr(), dnnl_engine(), hint);
  dx = Tensor::empty_like(x);  // (N, C, H, W), x's layout
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x, data)},
                                       {DNNL_ARG_DIFF_DST, memory_of(diff_dst, data)},
                                       {DNNL_ARG_MEAN, memory_of(mean, channel_desc(C))},
                                       {DNNL_ARG_VARIANCE, memory_of(var, channel_desc(C))},
                                       {DNNL_ARG_DIFF_SRC, memory_of(dx, data)}};
  if (weight.defined()) {
    dweight = empty_cpu(Shape{C});  // (C)
    args.emplace(DNNL_ARG_SCALE, memory_of(weight, channel_desc(C)));
    args.emplace(DNNL_ARG_DIFF_SCALE, memory_of(dweight, channel_desc(C)));
  }
  Tensor shift;  // (C) the shift's value does not enter the gradients, but oneDNN asks for the argument
  if (has_bias) {
    dbias = empty_cpu(Shape{C});  // (C)
    shift = zeros_cpu(Shape{C}, DType::f32, Layout::Plain);
    args.emplace(DNNL_ARG_SHIFT, memory_of(shift, channel_desc(C)));
    args.emplace(DNNL_ARG_DIFF_SHIFT, memory_of(dbias, channel_desc(C)));
  }
  execute(bn_bwd(pd), pd, std::move(args));
}

}  // namespace packrat::cpu
