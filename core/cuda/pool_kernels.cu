// The pooling kernels: one thread per output (forward) or per input element (backward, a
// gather: no atomics), bodies in core/cuda/kernels/pool.h.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/pool_kernels.h"

namespace packrat::cuda {

void launch_max_pool_forward(const float* x, float* y, void* argmax, DType index_dtype, const PoolShape& g) {
  const int64_t n = g.N * g.C * g.OH * g.OW;
  if (index_dtype == DType::i32)
    launch_for_each(n, MaxPoolForward<int32_t>{x, y, static_cast<int32_t*>(argmax), g});
  else
    launch_for_each(n, MaxPoolForward<uint8_t>{x, y, static_cast<uint8_t*>(argmax), g});
}

void launch_avg_pool_forward(const float* x, float* y, const PoolShape& g, bool include_padding) {
  launch_for_each(g.N * g.C * g.OH * g.OW, AvgPoolForward{x, y, g, include_padding});
}

void launch_max_pool_backward(const float* gy, const void* argmax, DType index_dtype, float* dx, const PoolShape& g) {
  const int64_t n = g.N * g.C * g.H * g.W;
  if (index_dtype == DType::i32)
    launch_for_each(n, MaxPoolBackward<int32_t>{gy, static_cast<const int32_t*>(argmax), dx, g});
  else
    launch_for_each(n, MaxPoolBackward<uint8_t>{gy, static_cast<const uint8_t*>(argmax), dx, g});
}

void launch_avg_pool_backward(const float* gy, float* dx, const PoolShape& g, bool include_padding) {
  launch_for_each(g.N * g.C * g.H * g.W, AvgPoolBackward{gy, dx, g, include_padding});
}

void launch_adaptive_avg_pool_forward(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                      int64_t OW) {
  launch_for_each(NC * OH * OW, AdaptiveAvgPoolForward{x, y, H, W, OH, OW});
}

void launch_adaptive_avg_pool_backward(const float* gy, float* dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                       int64_t OW) {
  launch_for_each(NC * H * W, AdaptiveAvgPoolBackward{gy, dx, H, W, OH, OW});
}

}  // namespace packrat::cuda
