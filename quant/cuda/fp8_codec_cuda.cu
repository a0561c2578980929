// The CUDA kernels of the fp8 codec over the bodies of quant/fp8/fp8_math.h, which the CPU kernels
// run too (tests/quant/fp8_device_test.cpp replays these kernels' lanes and threads on the host
// against the CPU's bytes).
#include <cuda_runtime.h>

#include "core/cuda/launch.cuh"
#include "quant/cuda/launchers.h"
#include "quant/fp8/fp8_math.h"

namespace packrat::cuda {

namespace {

// Thread t: group t / lanes, lane t % lanes (a group's lanes are neighbours in one warp). The loop
// runs while any lane of the warp has work, so the shuffles see every lane; a lane past the end
// brings an amax of 0 and writes nothing.
template <Fp8Format F>
__global__ void fp8_encode_groups_kernel(Fp8GroupEncodeBody<F> body, int64_t groups, int lane_shift) {
  const int lanes = 1 << lane_shift;
  const int64_t threads = groups << lane_shift;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t t = first, warp = first - (threadIdx.x & 31); warp < threads; t += stride, warp += stride) {
    const bool live = t < threads;
    const int64_t group = t >> lane_shift;
    const int lane = static_cast<int>(t & (lanes - 1));
    float amax = live ? body.lane_amax(group, lane, lanes) : 0.0f;
    for (int offset = lanes / 2; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullWarp, amax, offset));
    if (live) body.encode(group, lane, lanes, amax);
  }
}

// Thread t: fp8_amax_strided(x, t, n, threads); the warp's max by shuffles; lane 0's into *amax by
// atomicMax on its bits (non-negative floats order as their bits; *amax starts at 0).
__global__ void fp8_amax_kernel(const float* x, int64_t n, unsigned* amax) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  float m = fp8_amax_strided(x, t, n, threads);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(kFullWarp, m, offset));
  if ((threadIdx.x & 31) == 0) atomicMax(amax, __float_as_uint(m));
}

// Threads of the amax kernel for n elements: about 8 elements a thread.
int64_t fp8_amax_threads(int64_t n) { return static_cast<int64_t>(blocks_for((n + 7) / 8)) * kThreadsPerBlock; }

}  // namespace

void launch_fp8_encode(const float* x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, uint8_t* codes, float* scales,
                       float* amax) {
  if (g.numel == 0) return;
  with_fp8_format(f, [&](auto fmt) {
    constexpr Fp8Format F = decltype(fmt)::value;
    if (s == Fp8Scale::PerGroup) {
      const int lanes = fp8_group_lanes(g.group_size);
      int shift = 0;
      while ((1 << shift) < lanes) ++shift;
      const int64_t threads = g.groups() << shift;
      fp8_encode_groups_kernel<F><<<blocks_for(threads), kThreadsPerBlock>>>(
          Fp8GroupEncodeBody<F>{x, g, codes, scales}, g.groups(), shift);
      return;
    }
    cudaMemsetAsync(amax, 0, sizeof(float));  // an error here is reported by the caller's launch check
    const int64_t threads = fp8_amax_threads(g.numel);
    fp8_amax_kernel<<<static_cast<unsigned>(threads / kThreadsPerBlock), kThreadsPerBlock>>>(
        x, g.numel, reinterpret_cast<unsigned*>(amax));
    launch_for_each((g.numel + 3) / 4, Fp8TensorEncodeBody<F>{x, g.numel, amax, codes, scales});
  });
}

void launch_fp8_decode(const uint8_t* codes, const float* scales, Fp8Format f, const Fp8Geometry& g, float* out) {
  if (g.numel == 0) return;
  with_fp8_format(f, [&](auto fmt) {
    constexpr Fp8Format F = decltype(fmt)::value;
    launch_for_each((g.numel + 3) / 4, Fp8DecodeBody<F>{codes, scales, g, out});
  });
}

}  // namespace packrat::cuda
