// CudaBackend: per-row primitives over the last dim: softmax, cross-entropy with label
// smoothing and ignore_index, layernorm (the kernels: rows_kernels.cu, their bodies: kernels/rows.h).
#include <cuda_runtime.h>

#include <string>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels/rows.h"
#include "core/cuda/rows_kernels.h"

namespace packrat::cuda {

namespace {

// A plain f32 output on `device` under the thread's TagScope.
Tensor output_on(Device device, const Shape& shape) {
  return Tensor::empty(shape, DType::f32, Layout::Plain, TagScope::current(), device);
}

// Scratch that lives for one primitive call: tagged Workspace, so the memory report sees it.
Tensor scratch_on(Device device, int64_t numel, DType dtype) {
  return Tensor::empty(Shape{numel}, dtype, Layout::Plain, MemTag::Workspace, device);
}

}  // namespace

Tensor CudaBackend::softmax_forward(const Tensor& x_any, float scale, DType out) {
  x_any.check_dtype(DType::f32, "softmax");
  PACKRAT_CHECK(out == DType::f32, "{}: the GPU's softmax writes f32, not {}", op_where("softmax"), dtype_name(out));
  const Tensor x = scale == 1.0f ? x_any.to_plain() : this->scale(x_any.to_plain(), scale);
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  Tensor y = output_on(device(), x.shape());  // (..., D)
  launch_softmax_forward(x.device_data<float>(), y.device_data<float>(), R, D);
  PACKRAT_CHECK_LAUNCH("softmax_forward");
  return y;
}

Tensor CudaBackend::softmax_backward(const Tensor& y_any, const Tensor& grad, float scale, DType out) {
  PACKRAT_CHECK(out == DType::f32, "{} backward: the GPU's softmax writes f32, not {}", op_where("softmax"),
                dtype_name(out));
  const Tensor y = y_any.to_plain();
  const Tensor g = grad.to_plain();
  PACKRAT_CHECK(y.shape() == g.shape(), "{} backward: gradient {} for output {}", op_where("softmax"),
                g.shape().str(), y.shape().str());
  const int64_t D = y.dim(-1), R = D == 0 ? 0 : y.numel() / D;
  Tensor dx = output_on(device(), y.shape());  // (..., D)
  launch_softmax_backward(y.device_data<float>(), g.device_data<float>(), dx.device_data<float>(), R, D);
  PACKRAT_CHECK_LAUNCH("softmax_backward");
  return scale == 1.0f ? dx : this->scale(dx, scale);
}

Backend::CrossEntropyOut CudaBackend::cross_entropy_forward(const Tensor& logits_any, const Tensor& targets,
                                                            float label_smoothing, bool want_probs,
                                                            int64_t ignore_index) {
  const std::string& layer = LayerScope::current();
  const Tensor logits = logits_any.to_plain();
  const int64_t N = logits.dim(0), C = logits.dim(1);
  PACKRAT_CHECK(targets.numel() == N, "cross_entropy {}: {} targets for logits {}", layer, targets.numel(),
                logits.shape().str());
  CrossEntropyOut res;
  res.loss = output_on(device(), Shape());  // scalar
  if (want_probs) res.probs = output_on(device(), Shape{N, C});  // (N, C)
  Tensor row_loss = scratch_on(device(), N, DType::f64);  // (N)
  Tensor bad = scratch_on(device(), 1, DType::i64);  // the first sample with a bad target, as unsigned
  auto* bad_index = static_cast<unsigned long long*>(bad.raw());
  PACKRAT_CUDA_CHECK(cudaMemsetAsync(bad_index, 0xFF, sizeof(unsigned long long), nullptr));  // kNoBadIndex
  const bool ignoring = ignore_index != kNoIgnoreIndex;
  Tensor count;  // (1) the targets not ignored; without an ignore_index, N
  if (ignoring) count = scratch_on(device(), 1, DType::f64);
  launch_cross_entropy_forward(logits.device_data<float>(), targets.device_data<int64_t>(),
                               row_loss.device_data<double>(), res.loss.device_data<float>(),
                               want_probs ? res.probs.device_data<float>() : nullptr,
                               ignoring ? count.device_data<double>() : nullptr, bad_index, N, C, label_smoothing,
                               ignore_index);
  PACKRAT_CHECK_LAUNCH("cross_entropy_forward");
  // The one host synchronisation the contract needs: a bad target must throw here. The host
  // reads the loss every step anyway, so this waits for work it would wait for soon after.
  unsigned long long first_bad = kNoBadIndex;
  PACKRAT_CUDA_CHECK(cudaMemcpy(&first_bad, bad_index, sizeof first_bad, cudaMemcpyDeviceToHost));
  if (first_bad != kNoBadIndex) {
    const auto n = static_cast<int64_t>(first_bad);
    int64_t t = 0;
    PACKRAT_CUDA_CHECK(
        cudaMemcpy(&t, targets.device_data<int64_t>() + n, sizeof t, cudaMemcpyDeviceToHost));
    fail("cross_entropy {}: target {} of sample {} is out of range [0, {})", layer, t, n, C);
  }
  res.count = N;
  if (ignoring) {  // after the synchronisation above: no further wait
    double m = 0;
    PACKRAT_CUDA_CHECK(cudaMemcpy(&m, count.device_data<double>(), sizeof m, cudaMemcpyDeviceToHost));
    res.count = static_cast<int64_t>(m);
  }
  return res;
}

Tensor CudaBackend::cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                           const Tensor& grad_loss_any, int64_t ignore_index, int64_t count) {
  const int64_t N = probs.dim(0), C = probs.dim(1);
  PACKRAT_CHECK(grad_loss_any.numel() == 1 && (grad_loss_any.dtype() == DType::f32 || grad_loss_any.dtype() == DType::f64),
                "{} backward: the loss gradient must be one f32 or f64 element, got {}", op_where("cross_entropy"),
                grad_loss_any.describe());
  // Read by the kernel on the device (no host round trip); a seed made on the host is copied over.
  const Tensor grad_loss = grad_loss_any.to(device());
  Tensor dx = output_on(device(), Shape{N, C});  // (N, C)
  launch_cross_entropy_backward(probs.device_data<float>(), targets.device_data<int64_t>(), grad_loss.raw(),
                                grad_loss.dtype(), dx.device_data<float>(), N, C, label_smoothing, ignore_index,
                                count);
  PACKRAT_CHECK_LAUNCH("cross_entropy_backward");
  return dx;
}

Backend::LayerNormOut CudaBackend::layernorm_forward(const Tensor& x_any, const Tensor& weight, const Tensor& bias,
                                                     float eps) {
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  LayerNormOut res{output_on(device(), x.shape()), output_on(device(), Shape{R}),
                   output_on(device(), Shape{R})};  // (..., D), (R), (R)
  launch_layernorm_forward(x.device_data<float>(), f32_or_null(weight), f32_or_null(bias), res.y.device_data<float>(),
                           res.mean.device_data<float>(), res.rstd.device_data<float>(), R, D, eps);
  PACKRAT_CHECK_LAUNCH("layernorm_forward");
  return res;
}

Backend::LayerNormGrads CudaBackend::layernorm_backward(const Tensor& x_any, const Tensor& mean, const Tensor& rstd,
                                                        const Tensor& weight, const Tensor& grad, bool want_dweight,
                                                        bool want_dbias) {
  const Tensor x = x_any.to_plain();
  const Tensor g = grad.to_plain();
  PACKRAT_CHECK(x.shape() == g.shape(), "{} backward: gradient {} for input {}", op_where("layernorm"),
                g.shape().str(), x.shape().str());
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  LayerNormGrads res;
  res.dx = output_on(device(), x.shape());  // (..., D)
  launch_layernorm_backward_dx(x.device_data<float>(), mean.device_data<float>(), rstd.device_data<float>(),
                               f32_or_null(weight), g.device_data<float>(), res.dx.device_data<float>(), R, D);
  PACKRAT_CHECK_LAUNCH("layernorm_backward (dx)");
  if (want_dweight || want_dbias) {
    if (want_dweight) res.dweight = output_on(device(), Shape{D});  // (D)
    if (want_dbias) res.dbias = output_on(device(), Shape{D});      // (D)
    Tensor partials = scratch_on(device(), 2 * layernorm_param_chunks(R, D) * D, DType::f64);  // (2, chunks, D)
    launch_layernorm_backward_params(x.device_data<float>(), mean.device_data<float>(), rstd.device_data<float>(),
                                     g.device_data<float>(), f32_or_null(res.dweight), f32_or_null(res.dbias),
                                     partials.device_data<double>(), R, D);
    PACKRAT_CHECK_LAUNCH("layernorm_backward (dweight, dbias)");
  }
  return res;
}

}  // namespace packrat::cuda
