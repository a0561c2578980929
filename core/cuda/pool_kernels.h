#pragma once
// Launchers of the pooling kernels (pool_kernels.cu) over plain NCHW buffers. CUDA-free and
// fmt-free; the caller checks the launch (PACKRAT_CHECK_LAUNCH).
#include <cstdint>

#include "core/cuda/kernels/pool.h"
#include "core/dtype.h"

namespace packrat::cuda {

// argmax null (inference) or of index_dtype u8 / i32.
void launch_max_pool_forward(const float* x, float* y, void* argmax, DType index_dtype, const PoolShape& g);
void launch_avg_pool_forward(const float* x, float* y, const PoolShape& g, bool include_padding);
void launch_max_pool_backward(const float* gy, const void* argmax, DType index_dtype, float* dx, const PoolShape& g);
void launch_avg_pool_backward(const float* gy, float* dx, const PoolShape& g, bool include_padding);
// x (NC, H, W) -> y (NC, OH, OW), and back.
void launch_adaptive_avg_pool_forward(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                      int64_t OW);
void launch_adaptive_avg_pool_backward(const float* gy, float* dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                       int64_t OW);

}  // namespace packrat::cuda
