#pragma once
// Launchers of the convolution's own kernels (conv_kernels.cu): the bias, which cuDNN's legacy
// convolution calls leave to us. CUDA-free and fmt-free.
#include <cstdint>

#include "core/cuda/kernels/channel_sums.h"  // channel_splits

namespace packrat::cuda {

// y (N, C, HW) += bias[c].
void launch_add_channel_bias(float* y, const float* bias, int64_t N, int64_t C, int64_t HW);
// out[c] = sum of g (N, C, HW) over n and hw, in double; partial (C, splits, 2) scratch with
// splits = channel_splits(N * HW).
void launch_channel_sums(const float* g, int64_t N, int64_t C, int64_t HW, double* partial, int splits, float* out);

}  // namespace packrat::cuda
