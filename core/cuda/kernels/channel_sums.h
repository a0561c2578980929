#pragma once
// Per-channel sums over an NCHW buffer (batchnorm statistics and gradients, the convolution's
// bias gradient), CUDA-free: the reduction kernel (core/cuda/channel_sums.cuh) gives channel c's
// elements to a grid of (C, splits) blocks; each thread adds a Term's two values per element in
// double, the block sums them, a warp per channel adds the splits in a fixed order
// (ChannelPartials), so results do not vary between runs, and hands the two sums to a finalize
// body (kernels/batchnorm.h, kernels/bias.h): body(c, a, b).
#include <cstdint>

#include "core/hd.h"

namespace packrat::cuda {

// The (N, C, HW) buffer the per-channel kernels see for an (N, C, H, W) tensor of HW = H * W:
// plain as it is, NHWC (channels_last) as (N * H * W, C, 1).
struct ChannelView {
  int64_t N, C, HW;
};
inline ChannelView channel_view(int64_t N, int64_t C, int64_t HW, bool channels_last) {
  return channels_last ? ChannelView{N * HW, C, 1} : ChannelView{N, C, HW};
}

// Element j in [0, N * HW) of channel c of an (N, C, HW) buffer.
PACKRAT_HD inline int64_t channel_element(int64_t c, int64_t j, int64_t C, int64_t HW) {
  return ((j / HW) * C + c) * HW + j % HW;
}

// The channel of element i of an (N, C, HW) buffer, (i / HW) % C, in 32-bit arithmetic where it
// fits (a GPU divides 64-bit integers in software, slower than these kernels' memory traffic).
PACKRAT_HD inline int64_t channel_of(int64_t i, int64_t C, int64_t HW) {
  if (((i | C | HW) >> 32) == 0) {
    const uint32_t u = static_cast<uint32_t>(i), c = static_cast<uint32_t>(C), hw = static_cast<uint32_t>(HW);
    return static_cast<int64_t>((hw == 1 ? u : u / hw) % c);
  }
  return (i / HW) % C;
}

// The channels of elements i0 .. i0 + 3 (c[0..4)): one channel_of, then, channels innermost
// (HW == 1), the next channel each; otherwise each its own.
PACKRAT_HD inline void channels_of4(int64_t i0, int64_t C, int64_t HW, int64_t* c) {
  c[0] = channel_of(i0, C, HW);
  for (int k = 1; k < 4; ++k) c[k] = HW == 1 ? (c[k - 1] + 1 == C ? 0 : c[k - 1] + 1) : channel_of(i0 + k, C, HW);
}

// Splits per channel: enough blocks to fill a GPU when C is small, at most 64, each summing
// at least 8192 elements when there are that many. Channels innermost (HW == 1, an NHWC buffer
// seen as (N * H * W, C, 1)), one block sums 32 channels at once, so a channel takes more and
// shorter splits: at most 512, of at least 256 rows (ResNet-18 at batch 512: 1024 blocks a stage
// of 32 x 32 and of 16 x 16 pixels, 512 of 8 x 8, two and one waves on an H100).
inline int channel_splits(int64_t per_channel, int64_t HW) {
  const int64_t min_len = HW == 1 ? 256 : 8192, max_splits = HW == 1 ? 512 : 64;
  const int64_t s = (per_channel + min_len - 1) / min_len;
  return static_cast<int>(s < 1 ? 1 : (s > max_splits ? max_splits : s));
}

// Partial sums of split s of channel c: (a, b) at partial[(c * splits + s) * 2 + {0, 1}]. One warp
// totals a channel (channel_sums.cuh's channel_finalize_kernel): lane l adds splits l, l + 32, ...
// in order (lane_sums), then lane l + offset is added into lane l for offset 16, 8, 4, 2, 1;
// sums() replays exactly that on the host, so both give the same bits, run after run.
constexpr int kSplitLanes = 32;
struct ChannelPartials {
  const double* partial;  // (C, splits, 2)
  int splits;
  PACKRAT_HD void lane_sums(int64_t c, int lane, double& a, double& b) const {
    a = 0, b = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 4  // four loads in flight, added in the same order
#endif
    for (int s = lane; s < splits; s += kSplitLanes) {  // neighbouring lanes read neighbouring pairs
      a += partial[(c * splits + s) * 2];
      b += partial[(c * splits + s) * 2 + 1];
    }
  }
  void sums(int64_t c, double& a, double& b) const {
    double la[kSplitLanes], lb[kSplitLanes];
    for (int l = 0; l < kSplitLanes; ++l) lane_sums(c, l, la[l], lb[l]);
    for (int offset = kSplitLanes / 2; offset > 0; offset /= 2)
      for (int l = 0; l < offset; ++l) {
        la[l] += la[l + offset];
        lb[l] += lb[l + offset];
      }
    a = la[0];
    b = lb[0];
  }
};

// The shift batchnorm's moments are taken about: channel c's first element x[0, c, 0, 0] (no
// cancellation when |mean| >> std), as the CPU backend does; read where it is needed, so no kernel
// gathers the shifts first.
PACKRAT_HD inline float channel_center(const float* x, int64_t c, int64_t HW) { return x[c * HW]; }

// Terms: what one element at offset `at` of channel c adds to (a, b).
// (x - center, (x - center)^2): moments about channel_center (batchnorm forward).
struct CenteredMomentsTerm {
  const float* x;  // (N, C, H, W)
  int64_t HW;
  PACKRAT_HD void operator()(int64_t c, int64_t at, double& a, double& b) const {
    const double v = static_cast<double>(x[at]) - channel_center(x, c, HW);
    a += v;
    b += v * v;
  }
};
// (g, g * (x - mean)): batchnorm backward.
struct GradMomentsTerm {
  const float* x;     // (N, C, H, W)
  const float* g;     // (N, C, H, W)
  const float* mean;  // (C)
  PACKRAT_HD void operator()(int64_t c, int64_t at, double& a, double& b) const {
    const double gv = g[at];
    a += gv;
    b += gv * (static_cast<double>(x[at]) - mean[c]);
  }
};
// (g, 0): the convolution's bias gradient.
struct SumTerm {
  const float* g;  // (N, C, H, W)
  PACKRAT_HD void operator()(int64_t, int64_t at, double& a, double&) const { a += g[at]; }
};

}  // namespace packrat::cuda
