#pragma once
// Sums across a warp and across a thread block, for the row and reduction kernels. Included by
// .cu files only; blockDim.x must be a multiple of 32 and at most 1024.
#include <cuda_runtime.h>

namespace packrat::cuda {

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;  // complete in lane 0
}

// The sum of v over the block, returned to every thread. Calls __syncthreads(): every thread of
// the block must call it, the same number of times.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[32];  // one per warp
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? partial[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

// The max of v over a warp / a block, as max_of (kernels/rows.h) computes it; the same rules as
// warp_sum / block_sum.
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, v, offset);
    v = v < o ? o : v;
  }
  return v;  // complete in lane 0
}

__device__ inline float block_max(float v) {
  __shared__ float partial[32];  // one per warp
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = warp_max(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_max(lane < warps ? partial[lane] : partial[0]);  // only warp 0 reads partial
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

}  // namespace packrat::cuda
