// The batchnorm kernels: per-channel sums (channel_sums.cuh), per-channel finalize bodies and
// per-element bodies (core/cuda/kernels/batchnorm.h).
#include "core/cuda/batchnorm_kernels.h"
#include "core/cuda/channel_sums.cuh"
#include "core/cuda/kernels/batchnorm.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

void launch_batchnorm_statistics(const float* x, int64_t N, int64_t C, int64_t HW, const float* weight,
                                 const float* bias, float eps, double* partial, int splits, float* mean, float* var,
                                 float* scale, float* shift) {
  launch_channel_partial_sums(CenteredMomentsTerm{x, HW}, N, C, HW, splits, partial);
  launch_channel_finalize(
      ChannelPartials{partial, splits}, C,
      BatchStatsFinalize{x, HW, weight, bias, static_cast<double>(N * HW), eps, mean, var, scale, shift});
}

void launch_batchnorm_given_affine(const float* mean, const float* var, const float* weight, const float* bias,
                                   float eps, int64_t C, float* scale, float* shift) {
  launch_for_each(C, GivenStatsAffine{mean, var, weight, bias, eps, scale, shift});
}

void launch_channel_affine(const float* x, float* y, const float* scale, const float* shift, int64_t N, int64_t C,
                           int64_t HW) {
  launch_for_each(quads_of(N * C * HW), ChannelAffine{x, y, scale, shift, C, HW, N * C * HW});
}

void launch_batchnorm_backward(const float* x, const float* gy, const float* mean, const float* var,
                               const float* weight, float eps, bool global_stats, int64_t N, int64_t C, int64_t HW,
                               double* partial, int splits, float* dweight, float* dbias, float* k, float* a, float* b,
                               float* dx) {
  launch_channel_partial_sums(GradMomentsTerm{x, gy, mean}, N, C, HW, splits, partial);
  launch_channel_finalize(
      ChannelPartials{partial, splits}, C,
      BatchGradFinalize{var, weight, static_cast<double>(N * HW), eps, global_stats, dweight, dbias, k, a, b});
  launch_for_each(quads_of(N * C * HW), BatchNormBackwardElement{x, gy, dx, mean, k, a, b, C, HW, N * C * HW});
}

void launch_running_update(float* running_mean, float* running_var, int64_t* count, const float* batch_mean,
                           const float* batch_var, int64_t C, float momentum, double var_correction) {
  launch_for_each(C, RunningUpdate{running_mean, running_var, count, batch_mean, batch_var, momentum, var_correction});
}

}  // namespace packrat::cuda
