#pragma once
// Launchers of the memory-efficient attention kernels and the attention masks' helpers
// (attention_kernels.cu, bodies in kernels/attention.h). CUDA-free and fmt-free; the caller
// (cuda_backend_attention.cpp) checks the launch afterwards (PACKRAT_CHECK_LAUNCH).
#include <cstdint>

#include "core/cuda/kernels/attention.h"

namespace packrat::cuda {

constexpr int kAttentionLanes = 32;  // a warp per row
constexpr int64_t kAttentionMaxHeadDim = int64_t{kAttentionLanes} * kAttentionMaxPerLane;

void launch_attention_forward(const AttentionGeometry& a, int64_t G, float* y, float* lse);
// Pass 1 then pass 2; d (G, T) is scratch; dq, dk, dv may each be null.
void launch_attention_backward(const AttentionGeometry& a, int64_t G, const float* y, const float* lse,
                               const float* dy, float* d, float* dq, float* dk, float* dv);
// scores (B, rows_per_sample, S) in place
void launch_key_padding_fill(float* scores, const int64_t* lengths, int64_t B, int64_t rows_per_sample, int64_t S);
// tokens (N, T) -> lengths (N)
void launch_sequence_lengths(const int64_t* tokens, int64_t* lengths, int64_t N, int64_t T, int64_t pad);

}  // namespace packrat::cuda
