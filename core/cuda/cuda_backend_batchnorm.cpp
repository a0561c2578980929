// CudaBackend: batch normalization with packrat's kernels (batchnorm_kernels.h), in the CPU
// backend's arithmetic: per-channel sums in double (about a per-channel shift in the forward),
// then one elementwise pass. cuDNN's batchnorm is not used: it would update the running
// statistics itself, which the contract leaves to batchnorm_update_running, and its variance
// and saved inverse std differ from what the ops save. Plain inputs are (N, C, HW) buffers; NHWC
// inputs, what this backend's convolutions make, are the same arithmetic over an (N * H * W, C, 1)
// buffer, so the kernels serve both (channel_sums.cuh sums channels-innermost buffers with a
// kernel of their own). Blocked (nChw16c / nChw8c) inputs, which only the CPU backend makes, are
// brought to plain and the outputs returned in the input's layout.
#include "core/cuda/batchnorm_kernels.h"
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_handles.h"

namespace packrat::cuda {

namespace {

ChannelView check_bn_input(const Tensor& x, const char* primitive) {
  PACKRAT_CHECK(x.rank() == 4 && x.dtype() == DType::f32, "{} ({}): input {} is not a 4-d f32 tensor",
                op_where("batchnorm"), primitive, x.describe());
  return {x.dim(0), x.dim(1), x.dim(2) * x.dim(3)};
}

// The (N, C, HW) buffer the kernels see (channel_sums.h): plain as it is, NHWC as (N * H * W, C, 1).
ChannelView view_of(const Tensor& x) {
  return channel_view(x.dim(0), x.dim(1), x.dim(2) * x.dim(3), x.layout() == Layout::NHWC);
}

// The layout the kernels run in: NHWC stays, anything else becomes plain.
Layout compute_layout(const Tensor& x) { return x.layout() == Layout::NHWC ? Layout::NHWC : Layout::Plain; }

void check_channels(const Tensor& t, int64_t C, const char* name, const char* primitive) {
  PACKRAT_CHECK(!t.defined() || (t.dtype() == DType::f32 && t.numel() == C), "{} ({}): {} is {}, expected ({}) f32",
                op_where("batchnorm"), primitive, name, t.describe(), C);
}

const float* maybe(const Tensor& t) { return t.defined() ? t.device_data<float>() : nullptr; }
float* maybe_mut(const Tensor& t) { return t.defined() ? t.device_data<float>() : nullptr; }

}  // namespace

void CudaBackend::batchnorm_forward_training(const Tensor& x_any, const Tensor& weight, const Tensor& bias, float eps,
                                             Tensor& y, Tensor& mean, Tensor& var) {
  make_current(index_);
  const ChannelView logical = check_bn_input(x_any, "batchnorm_forward_training");
  check_channels(weight, logical.C, "weight", "batchnorm_forward_training");
  check_channels(bias, logical.C, "bias", "batchnorm_forward_training");
  PACKRAT_CHECK(logical.N * logical.HW > 0, "{}: training needs at least one value per channel, got {}",
                op_where("batchnorm"), x_any.describe());
  const Tensor x = to_layout(x_any, compute_layout(x_any));  // (N, C, H, W), plain or NHWC
  const ChannelView v = view_of(x);
  const MemTag tag = TagScope::current();
  mean = Tensor::empty(Shape{v.C}, DType::f32, Layout::Plain, tag, device());  // (C)
  var = Tensor::empty(Shape{v.C}, DType::f32, Layout::Plain, tag, device());   // (C), biased
  const int splits = channel_splits(v.N * v.HW, v.HW);
  const Tensor partial = Tensor::empty(Shape{v.C * splits * 2}, DType::f64, Layout::Plain, MemTag::Workspace,
                                       device());  // (C, splits, 2)
  const Tensor coef = Tensor::empty(Shape{2, v.C}, DType::f32, Layout::Plain, MemTag::Workspace,
                                    device());  // (2, C): scale, shift
  float* scale = coef.device_data<float>();
  Tensor yp = Tensor::empty(x.shape(), DType::f32, x.layout(), tag, device());  // (N, C, H, W) as x
  launch_batchnorm_statistics(x.device_data<float>(), v.N, v.C, v.HW, maybe(weight), maybe(bias), eps,
                              partial.device_data<double>(), splits, mean.device_data<float>(),
                              var.device_data<float>(), scale, scale + v.C);
  launch_channel_affine(x.device_data<float>(), yp.device_data<float>(), scale, scale + v.C, v.N, v.C, v.HW);
  PACKRAT_CHECK_LAUNCH("batchnorm_forward_training");
  y = to_layout(yp, x_any.layout());
}

Tensor CudaBackend::batchnorm_forward_inference(const Tensor& x_any, const Tensor& weight, const Tensor& bias,
                                                const Tensor& mean, const Tensor& var, float eps) {
  make_current(index_);
  const int64_t C = check_bn_input(x_any, "batchnorm_forward_inference").C;
  check_channels(weight, C, "weight", "batchnorm_forward_inference");
  check_channels(bias, C, "bias", "batchnorm_forward_inference");
  check_channels(mean, C, "mean", "batchnorm_forward_inference");
  check_channels(var, C, "var", "batchnorm_forward_inference");
  const Tensor x = to_layout(x_any, compute_layout(x_any));  // (N, C, H, W), plain or NHWC
  const ChannelView v = view_of(x);
  const Tensor coef = Tensor::empty(Shape{2, v.C}, DType::f32, Layout::Plain, MemTag::Workspace,
                                    device());  // (2, C): scale, shift
  float* scale = coef.device_data<float>();
  Tensor yp = Tensor::empty(x.shape(), DType::f32, x.layout(), TagScope::current(), device());  // (N, C, H, W) as x
  launch_batchnorm_given_affine(mean.device_data<float>(), var.device_data<float>(), maybe(weight), maybe(bias), eps,
                                v.C, scale, scale + v.C);
  launch_channel_affine(x.device_data<float>(), yp.device_data<float>(), scale, scale + v.C, v.N, v.C, v.HW);
  PACKRAT_CHECK_LAUNCH("batchnorm_forward_inference");
  return to_layout(yp, x_any.layout());
}

void CudaBackend::batchnorm_backward(const Tensor& x_any, const Tensor& gy_any, const Tensor& weight, bool has_bias,
                                     const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                                     Tensor& dweight, Tensor& dbias) {
  make_current(index_);
  const int64_t C = check_bn_input(x_any, "batchnorm_backward").C;
  PACKRAT_CHECK(gy_any.shape() == x_any.shape() && gy_any.dtype() == DType::f32,
                "{} (batchnorm_backward): gradient {} does not match input {}", op_where("batchnorm"),
                gy_any.describe(), x_any.describe());
  check_channels(weight, C, "weight", "batchnorm_backward");
  check_channels(mean, C, "mean", "batchnorm_backward");
  check_channels(var, C, "var", "batchnorm_backward");
  const Tensor x = to_layout(x_any, compute_layout(x_any));  // (N, C, H, W), plain or NHWC
  const Tensor gy = to_layout(gy_any, x.layout());            // (N, C, H, W) as x
  const ChannelView v = view_of(x);
  const MemTag tag = TagScope::current();
  if (weight.defined()) dweight = Tensor::empty(Shape{v.C}, DType::f32, Layout::Plain, tag, device());  // (C)
  if (has_bias) dbias = Tensor::empty(Shape{v.C}, DType::f32, Layout::Plain, tag, device());            // (C)
  const int splits = channel_splits(v.N * v.HW, v.HW);
  const Tensor partial = Tensor::empty(Shape{v.C * splits * 2}, DType::f64, Layout::Plain, MemTag::Workspace,
                                       device());  // (C, splits, 2)
  const Tensor coef = Tensor::empty(Shape{3, v.C}, DType::f32, Layout::Plain, MemTag::Workspace,
                                    device());  // (3, C): k, a, b of dx = k (dy - a - (x - mean) b)
  float* k = coef.device_data<float>();
  Tensor dxp = Tensor::empty(x.shape(), DType::f32, x.layout(), tag, device());  // (N, C, H, W) as x
  launch_batchnorm_backward(x.device_data<float>(), gy.device_data<float>(), mean.device_data<float>(),
                            var.device_data<float>(), maybe(weight), eps, global_stats, v.N, v.C, v.HW,
                            partial.device_data<double>(), splits, weight.defined() ? maybe_mut(dweight) : nullptr,
                            has_bias ? maybe_mut(dbias) : nullptr,
                            k, k + v.C, k + 2 * v.C, dxp.device_data<float>());
  PACKRAT_CHECK_LAUNCH("batchnorm_backward");
  dx = to_layout(dxp, x_any.layout());
}

void CudaBackend::batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                           const Tensor& mean, const Tensor& var, float momentum,
                                           double var_correction) {
  make_current(index_);
  check_running_update(running_mean, running_var, num_batches_tracked, mean, var);
  launch_running_update(running_mean.device_data<float>(), running_var.device_data<float>(),
                        num_batches_tracked ? num_batches_tracked->device_data<int64_t>() : nullptr,
                        mean.device_data<float>(), var.device_data<float>(), mean.numel(), momentum, var_correction);
  PACKRAT_CHECK_LAUNCH("batchnorm_update_running");
}

}  // namespace packrat::cuda
