#pragma once
// Launchers of the batchnorm kernels (batchnorm_kernels.cu) over plain (N, C, HW) buffers.
// CUDA-free and fmt-free. Scratch buffers come from the caller (packrat's allocator, Workspace):
// partial (C, splits, 2) doubles with splits = channel_splits(N * HW), and per-channel floats.
// weight / bias / dweight / dbias may be null.
#include <cstdint>

#include "core/cuda/kernels/channel_sums.h"

namespace packrat::cuda {

// Training statistics: mean, var (C), and the normalizing affine scale, shift (C).
void launch_batchnorm_statistics(const float* x, int64_t N, int64_t C, int64_t HW, const float* weight,
                                 const float* bias, float eps, double* partial, int splits, float* mean, float* var,
                                 float* scale, float* shift);
// The normalizing affine scale, shift (C) of given statistics.
void launch_batchnorm_given_affine(const float* mean, const float* var, const float* weight, const float* bias,
                                   float eps, int64_t C, float* scale, float* shift);
// y = x * scale[c] + shift[c].
void launch_channel_affine(const float* x, float* y, const float* scale, const float* shift, int64_t N, int64_t C,
                           int64_t HW);
// dx, and dweight / dbias when non-null; k, a, b (C) are scratch.
void launch_batchnorm_backward(const float* x, const float* gy, const float* mean, const float* var,
                               const float* weight, float eps, bool global_stats, int64_t N, int64_t C, int64_t HW,
                               double* partial, int splits, float* dweight, float* dbias, float* k, float* a, float* b,
                               float* dx);
// Both running statistics (C) and the batch counter (may be null) in one kernel (RunningUpdate).
void launch_running_update(float* running_mean, float* running_var, int64_t* count, const float* batch_mean,
                           const float* batch_var, int64_t C, float momentum, double var_correction);

}  // namespace packrat::cuda
