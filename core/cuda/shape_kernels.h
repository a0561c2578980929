#pragma once
// Launchers of the shape primitives' kernels (shape_kernels.cu), any dtype where the contract
// allows it. CUDA-free and fmt-free; the caller (cuda_backend_shape.cpp) checks the launch
// afterwards (PACKRAT_CHECK_LAUNCH). Sizes and pitches count elements, not bytes.
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cuda {

// x (B, M, N) -> y (B, N, M)
void launch_transpose_last2(const void* x, void* y, DType dtype, int64_t B, int64_t M, int64_t N);
// f32 plain x (N, Cin, H, W) -> y (N, Cout, Ho, Wo), and the backward grad (N, Cout, Ho, Wo) -> gx (N, Cin, H, W)
void launch_pad_channels_subsample(const float* x, float* y, int64_t N, int64_t Cin, int64_t H, int64_t W,
                                   int64_t Cout, int64_t stride);
void launch_pad_channels_subsample_backward(const float* grad, float* gx, int64_t N, int64_t Cin, int64_t H, int64_t W,
                                            int64_t Cout, int64_t stride);
// y (out_dims) of numel elements from x, src_stride[k] = x's stride of axis perm[k]; rank <= kMaxPermuteRank
void launch_permute(const void* x, void* y, DType dtype, int rank, const int64_t* out_dims, const int64_t* src_stride,
                    int64_t numel);
// `outer` runs of `run` elements from src + o * src_pitch to dst + o * dst_pitch
void launch_run_copy(const void* src, void* dst, DType dtype, int64_t outer, int64_t run, int64_t src_pitch,
                     int64_t dst_pitch);
// scores (rows, S), rows = (...) x T, in place
void launch_causal_mask_fill(float* scores, int64_t numel, int64_t T, int64_t S);

}  // namespace packrat::cuda
