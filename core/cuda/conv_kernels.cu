// The convolution's bias kernels (bodies in core/cuda/kernels/bias.h).
#include "core/cuda/channel_sums.cuh"
#include "core/cuda/conv_kernels.h"
#include "core/cuda/kernels/bias.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

void launch_add_channel_bias(float* y, const float* bias, int64_t N, int64_t C, int64_t HW) {
  launch_for_each(N * C * HW, AddChannelBias{y, bias, C, HW});
}

void launch_channel_sums(const float* g, int64_t N, int64_t C, int64_t HW, double* partial, int splits, float* out) {
  launch_channel_partial_sums(SumTerm{g}, N, C, HW, splits, partial);
  launch_channel_finalize(ChannelPartials{partial, splits}, C, ChannelSumFinalize{out});
}

}  // namespace packrat::cuda
