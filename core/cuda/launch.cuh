#pragma once
// Launching a per-index body on the GPU. The body is a PACKRAT_HD functor written in a CUDA-free
// header (core/cuda/kernels/*.h): the CPU tests run the very same functor over the same indices on
// the host (tests/support/host_launch.h), so the index arithmetic a GPU runs is checked on
// machines without one. Included by .cu files only. Everything runs on the legacy default stream,
// as do cuBLAS, cuDNN and the copies, so work is ordered without events.
//
// The .cu files never include fmt (its consteval format strings do not compile under nvcc): a
// launcher returns, and its caller in a .cpp checks cudaGetLastError() (check_launch in cuda_check.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace packrat::cuda {

constexpr int kThreadsPerBlock = 256;
constexpr unsigned kFullWarp = 0xffffffffu;  // every lane of a warp, for the *_sync intrinsics

// Blocks for n indices, one thread each, capped so that a grid-stride loop covers the rest.
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

template <class Body>
__global__ void for_each_index_kernel(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) body(i);
}

// body(i) for every i in [0, n), in any order: each index writes only its own outputs.
template <class Body>
void launch_for_each(int64_t n, const Body& body) {
  if (n <= 0) return;
  for_each_index_kernel<<<blocks_for(n), kThreadsPerBlock>>>(n, body);
}

template <class Body>
__global__ void for_each_lane_kernel(int64_t threads, int lane_shift, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int lanes = 1 << lane_shift;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < threads; t += stride)
    body(t >> lane_shift, static_cast<int>(t & (lanes - 1)), lanes);
}

// body(item, sub, lanes) for every item in [0, items) and sub in [0, lanes), lanes = 2^lane_shift
// up to 32: thread t takes item t / lanes, lane t % lanes, so an item's lanes are neighbours in a
// warp (a quantized group's or bucket's lanes writing consecutive quads).
template <class Body>
void launch_for_each_lane(int64_t items, int lane_shift, const Body& body) {
  if (items <= 0) return;
  const int64_t threads = items << lane_shift;
  for_each_lane_kernel<<<blocks_for(threads), kThreadsPerBlock>>>(threads, lane_shift, body);
}

}  // namespace packrat::cuda
