// The row section's kernels: a row body (kernels/rows.h) per row through launch_rows, the rest
// per index through launch_for_each.
#include "core/cuda/kernels/rows.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/row_launch.cuh"
#include "core/cuda/rows_kernels.h"

namespace packrat::cuda {

void launch_softmax_forward(const float* x, float* y, int64_t R, int64_t D) {
  launch_rows(R, D, SoftmaxForwardRow{x, y, D});
}

void launch_softmax_backward(const float* y, const float* g, float* dx, int64_t R, int64_t D) {
  launch_rows(R, D, SoftmaxBackwardRow{y, g, dx, D});
}

void launch_cross_entropy_forward(const float* logits, const int64_t* targets, double* row_loss, float* loss,
                                  float* probs, double* count, unsigned long long* bad, int64_t N, int64_t C,
                                  double label_smoothing, int64_t ignore_index) {
  launch_rows(N, C, CrossEntropyForwardRow{logits, targets, row_loss, probs, bad, C, label_smoothing, ignore_index});
  // The mean over the targets not ignored: one row of N, summed in a fixed order (deterministic, no atomics).
  launch_rows(1, N, TargetMeanToFloatRow{row_loss, targets, loss, count, N, ignore_index});
}

void launch_cross_entropy_backward(const float* probs, const int64_t* targets, const void* grad_loss,
                                   DType grad_dtype, float* dx, int64_t N, int64_t C, float label_smoothing,
                                   int64_t ignore_index, int64_t count) {
  const float off = label_smoothing / static_cast<float>(C), on = 1.0f - label_smoothing + off;
  if (grad_dtype == DType::f64)
    launch_for_each(N * C, CrossEntropyBackward<double>{probs, targets, static_cast<const double*>(grad_loss), dx,
                                                        count, C, off, on, ignore_index});
  else
    launch_for_each(N * C, CrossEntropyBackward<float>{probs, targets, static_cast<const float*>(grad_loss), dx,
                                                       count, C, off, on, ignore_index});
}

void launch_layernorm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                              float* rstd, int64_t R, int64_t D, float eps) {
  launch_rows(R, D, LayerNormForwardRow{x, weight, bias, y, mean, rstd, D, eps});
}

void launch_layernorm_backward_dx(const float* x, const float* mean, const float* rstd, const float* weight,
                                  const float* grad, float* dx, int64_t R, int64_t D) {
  launch_rows(R, D, LayerNormBackwardRow{x, mean, rstd, weight, grad, dx, D});
}

void launch_layernorm_backward_params(const float* x, const float* mean, const float* rstd, const float* grad,
                                      float* dweight, float* dbias, double* partials, int64_t R, int64_t D) {
  const int64_t chunks = layernorm_param_chunks(R, D), rows_per_chunk = (R + chunks - 1) / chunks;
  double* dw_part = dweight != nullptr ? partials : nullptr;      // (chunks, D)
  double* db_part = dbias != nullptr ? partials + chunks * D : nullptr;  // (chunks, D)
  launch_for_each(chunks * D, LayerNormParamPartials{x, mean, rstd, grad, dw_part, db_part, R, D, rows_per_chunk});
  if (dweight != nullptr) launch_for_each(D, SumChunksToFloat{dw_part, dweight, chunks, D});
  if (dbias != nullptr) launch_for_each(D, SumChunksToFloat{db_part, dbias, chunks, D});
}

}  // namespace packrat::cuda
