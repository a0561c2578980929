#pragma once
// Launchers of the row section's kernels (rows_kernels.cu): softmax, cross-entropy, layernorm.
// CUDA-free and fmt-free, so the g++ side (cuda_backend_rows.cpp) calls them with raw device
// pointers; it checks the launch afterwards (PACKRAT_CHECK_LAUNCH).
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cuda {

// x, y (R, D)
void launch_softmax_forward(const float* x, float* y, int64_t R, int64_t D);
// y, g, dx (R, D)
void launch_softmax_backward(const float* y, const float* g, float* dx, int64_t R, int64_t D);
// logits (N, C), targets (N) -> row_loss (N) scratch, loss (1), probs (N, C) or null, count (1) of
// the targets not equal to ignore_index (kNoIgnoreIndex: none) or null; bad (1) must hold
// kNoBadIndex beforehand and holds the first sample with a bad target afterwards.
void launch_cross_entropy_forward(const float* logits, const int64_t* targets, double* row_loss, float* loss,
                                  float* probs, double* count, unsigned long long* bad, int64_t N, int64_t C,
                                  double label_smoothing, int64_t ignore_index);
// probs (N, C), targets (N), grad_loss (1) of grad_dtype (f32 or f64), count the targets not
// ignored -> dx (N, C)
void launch_cross_entropy_backward(const float* probs, const int64_t* targets, const void* grad_loss,
                                   DType grad_dtype, float* dx, int64_t N, int64_t C, float label_smoothing,
                                   int64_t ignore_index, int64_t count);
// x, y (R, D), weight / bias (D) or null -> y, mean, rstd (R)
void launch_layernorm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                              float* rstd, int64_t R, int64_t D, float eps);
// dx (R, D) from x, grad (R, D), mean, rstd (R), weight (D) or null
void launch_layernorm_backward_dx(const float* x, const float* mean, const float* rstd, const float* weight,
                                  const float* grad, float* dx, int64_t R, int64_t D);
// dweight = sum_rows grad * xhat, dbias = sum_rows grad (D), each or null; partials (2, chunks, D)
// doubles of scratch, chunks = layernorm_param_chunks(R, D) (kernels/rows.h).
void launch_layernorm_backward_params(const float* x, const float* mean, const float* rstd, const float* grad,
                                      float* dweight, float* dbias, double* partials, int64_t R, int64_t D);

}  // namespace packrat::cuda
