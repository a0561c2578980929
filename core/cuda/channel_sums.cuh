#pragma once
// The per-channel reduction behind batchnorm and the convolution's bias gradient: block (c, s)
// of a (C, splits) grid sums a Term (core/cuda/kernels/channel_sums.h) over its share of channel
// c's N * HW elements in double and writes one (a, b) pair to partial[(c * splits + s) * 2].
// Then a warp per channel adds its splits (ChannelPartials) and calls a finalize body with the
// sums. Included by .cu files only.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/kernels/channel_sums.h"

namespace packrat::cuda {

// Elements a thread loads before it adds them (in the same order as one at a time, so the sums'
// bits do not change): one load in flight a thread kept the partial sums at 56-70% of the copy
// bandwidth that the elementwise batchnorm passes reach (Nsight Compute, H100, ResNet-18 at 512).
constexpr int kRowsInFlight = 4;

template <class Term>
__global__ void channel_partial_sums_kernel(Term term, int64_t C, int64_t HW, int64_t count, int64_t chunk,
                                            double* partial) {
  const int64_t c = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < count ? begin + chunk : count;
  double a = 0, b = 0;
  int64_t j = begin + threadIdx.x;
  const int64_t stride = blockDim.x;
  for (; j + (kRowsInFlight - 1) * stride < end; j += kRowsInFlight * stride) {
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) term(c, channel_element(c, j + u * stride, C, HW), a, b);
  }
  for (; j < end; j += stride) term(c, channel_element(c, j, C, HW), a, b);
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) {
    double* out = partial + (c * gridDim.y + blockIdx.y) * 2;
    out[0] = a;
    out[1] = b;
  }
}

// The same sums over a channels-innermost (rows, C) buffer (NHWC as (N * H * W, C, 1)): block
// (t, s) of a (C / 32 tiles, splits) grid sums channels [32 t, 32 t + 32) over split s of the
// rows, a warp reading 32 neighbouring channels of one row; its kRowLanes row lanes are added in
// order. 512-thread blocks, and splits enough for about two waves of them (channel_splits): with
// 256-thread blocks and half as many splits, ResNet-18's first stage at batch 512 filled half a
// wave, and these sums read 1.2 TB/s, 35% of an H100's (Nsight Compute).
constexpr int kRowLanes = 16;
template <class Term>
__global__ void __launch_bounds__(32 * kRowLanes)
    channels_last_partial_sums_kernel(Term term, int64_t C, int64_t rows, int64_t chunk, double* partial) {
  __shared__ double lanes[2][kRowLanes][32];  // (a or b, row lane, channel in tile)
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < rows ? begin + chunk : rows;
  double a = 0, b = 0;
  if (c < C) {
    int64_t r = begin + threadIdx.y;
    for (; r + (kRowsInFlight - 1) * kRowLanes < end; r += kRowsInFlight * kRowLanes) {
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) term(c, (r + kRowLanes * u) * C + c, a, b);
    }
    for (; r < end; r += kRowLanes) term(c, r * C + c, a, b);
  }
  lanes[0][threadIdx.y][threadIdx.x] = a;
  lanes[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kRowLanes; ++k) {
      a += lanes[0][k][threadIdx.x];
      b += lanes[1][k][threadIdx.x];
    }
    double* out = partial + (c * gridDim.y + blockIdx.y) * 2;
    out[0] = a;
    out[1] = b;
  }
}

// partial (C, splits, 2) from `term` over an (N, C, HW) buffer; splits = channel_splits(N * HW, HW).
template <class Term>
void launch_channel_partial_sums(const Term& term, int64_t N, int64_t C, int64_t HW, int splits, double* partial) {
  if (C <= 0) return;
  const int64_t count = N * HW, chunk = (count + splits - 1) / splits;
  if (HW == 1) {
    const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(splits));
    channels_last_partial_sums_kernel<<<grid, dim3(32, kRowLanes)>>>(term, C, count, chunk, partial);
    return;
  }
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(splits));
  channel_partial_sums_kernel<<<grid, 256>>>(term, C, HW, count, chunk, partial);
}

// body(c, a, b) with channel c's sums of `partials`, for c in [0, C): a warp a channel, its lanes
// adding the splits as ChannelPartials says (one thread over 256 splits took 45 us a channel).
template <class Body>
__global__ void channel_finalize_kernel(ChannelPartials partials, int64_t C, Body body) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kSplitLanes;
  const int lane = static_cast<int>(threadIdx.x % kSplitLanes);
  if (c >= C) return;  // the whole warp: blockDim.x is a multiple of 32
  double a, b;
  partials.lane_sums(c, lane, a, b);
  for (int offset = kSplitLanes / 2; offset > 0; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);  // lane l += lane l + offset, as sums() replays
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  if (lane == 0) body(c, a, b);
}

template <class Body>
void launch_channel_finalize(const ChannelPartials& partials, int64_t C, const Body& body) {
  if (C <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (C * kSplitLanes + kThreads - 1) / kThreads;
  channel_finalize_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(partials, C, body);
}

}  // namespace packrat::cuda
