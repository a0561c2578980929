#pragma once
// Launching a row body (core/cuda/kernels/rows.h: operator()(r, lane, lanes, reduce)) on the GPU:
// a warp per row for rows of up to kWarpRowMax elements (no shared memory, no __syncthreads), a
// block per row for longer ones. Grid-stride over rows; every lane of a warp / block walks the
// same rows, so the reductions inside a body are reached by all of them. Included by .cu files only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

constexpr int64_t kWarpRowMax = 1024;  // up to 32 elements per lane

// Sum / max over the 32 lanes of a warp, the result in every lane (butterfly shuffles).
// __host__ __device__ only so that the bodies' host instantiations compile; never run on the host.
struct WarpReducer {
  template <typename T>
  __host__ __device__ T sum(T v) const {
#if defined(__CUDA_ARCH__)
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
#endif
    return v;
  }
  __host__ __device__ float max(float v) const {
#if defined(__CUDA_ARCH__)
    for (int offset = 16; offset > 0; offset /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, offset);
      v = v < o ? o : v;
    }
#endif
    return v;
  }
};

// Sum / max over the threads of a block (block_sum, block_max), the result in every thread.
struct BlockReducer {
  template <typename T>
  __host__ __device__ T sum(T v) const {
#if defined(__CUDA_ARCH__)
    return block_sum(v);
#else
    return v;
#endif
  }
  __host__ __device__ float max(float v) const {
#if defined(__CUDA_ARCH__)
    return block_max(v);
#else
    return v;
#endif
  }
};

template <class Row>
__global__ void rows_by_warp_kernel(int64_t rows, Row row) {
  const int64_t warps = blockDim.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += static_cast<int64_t>(gridDim.x) * warps)
    row(r, lane, 32, WarpReducer{});
}

template <class Row>
__global__ void rows_by_block_kernel(int64_t rows, Row row) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    row(r, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), BlockReducer{});
}

// row(r, ...) for every r in [0, rows), rows of `length` elements.
template <class Row>
void launch_rows(int64_t rows, int64_t length, const Row& row) {
  if (rows <= 0) return;
  constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  if (length <= kWarpRowMax) {
    constexpr int64_t kWarpsPerBlock = kThreadsPerBlock / 32;
    const int64_t blocks = std::min((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks);
    rows_by_warp_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(rows, row);
  } else {
    const int threads = length >= 8192 ? 1024 : 256;
    rows_by_block_kernel<<<static_cast<unsigned>(std::min(rows, kMaxBlocks)), threads>>>(rows, row);
  }
}

}  // namespace packrat::cuda
