// The per-group codec's CUDA kernels over the PACKRAT_HD helpers of group_quant.h and the
// per-lane steps of group_quant_warp.h, so that a GPU writes the CPU's bytes (same Philox draws,
// same rounding, same packing). group_quant_warp.h says which lane does what, and why.
#include <cuda_runtime.h>

#include "core/cuda/launch.cuh"
#include "quant/group_quant_device.h"
#include "quant/group_quant_warp.h"
#include "quant/warp_range.cuh"

namespace packrat::cuda {

namespace {

constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpLanes;

// 32 / lanes groups a warp, `lanes` lanes a group: each lane's first block of 8 values stays in
// registers from the range scan to its codes (every block does when 8 * lanes >= G). kBits: the
// width where it is one of the common ones (the packing's shifts become constants), else 0 (g.bits).
template <int kBits>
__global__ void __launch_bounds__(kThreadsPerBlock, 4)
    quantize_groups_kernel(const float* x, GroupGeometry g, int lanes, Rounding rounding, QuantNoise noise,
                           uint8_t* codes, uint8_t* meta, double* range_sq) {
  __shared__ uint32_t noise_words[kWarpsPerBlock][kRoundNoiseWords];  // (warps, calls * stride)
  const int bits = kBits > 0 ? kBits : g.bits;
  const int lane = static_cast<int>(threadIdx.x % kWarpLanes), warp_here = static_cast<int>(threadIdx.x / kWarpLanes);
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + warp_here;
  if (warp >= quantize_warps(g, lanes)) return;  // the whole warp
  const QuantLane q = quant_lane(g, lanes, warp, lane);
  const float* xg = x + q.at.start;  // (len) of the lane's group
  const int64_t rounds = quantize_rounds(g, lanes);
  const int group_lead = lane & ~(lanes - 1);
  const unsigned group_lanes = lanes == kWarpLanes ? kFullWarp : ((1u << lanes) - 1u) << group_lead;

  // The range: every lane scans its blocks, then the group's lanes merge (xor offsets < lanes
  // stay within the group's lanes).
  float v[8] = {};  // the lane's block of the current round
  int n = lane_block_len(q, lanes, 0);
  load_floats8(xg + 8 * lane_block(q, lanes, 0), n, v);
  RangeScan range(__shfl_sync(kFullWarp, v[0], group_lead));  // the group's first value: its first lane's
  range.keep(v, n);
  for (int64_t r = 1; r < rounds; ++r) {
    float w[8];
    const int m = lane_block_len(q, lanes, r);
    load_floats8(xg + 8 * lane_block(q, lanes, r), m, w);
    range.keep(w, m);
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    RangeScan o = range;
    o.mn = __shfl_xor_sync(kFullWarp, range.mn, offset);
    o.mx = __shfl_xor_sync(kFullWarp, range.mx, offset);
    range.merge(o);
  }
  if (range.ends_in_zero()) {  // the same on all of the group's lanes: its first zero's sign
    uint64_t zero = first_zero_in(v, n, 8 * lane_block(q, lanes, 0));
    for (int64_t r = 1; r < rounds; ++r) {
      float w[8];
      const int m = lane_block_len(q, lanes, r);
      load_floats8(xg + 8 * lane_block(q, lanes, r), m, w);
      const uint64_t z = first_zero_in(w, m, 8 * lane_block(q, lanes, r));
      zero = z < zero ? z : zero;
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      const uint64_t z = __shfl_xor_sync(group_lanes, zero, offset);
      zero = z < zero ? z : zero;
    }
    range.settle_zero(zero);
  }
  range.finish();
  const GroupParams p = group_params(range.mn, range.mx, bits, g.meta);
  if (q.active && q.sub == 0) {
    store_group_meta(p, g.meta, meta + q.group * meta_bytes_per_group(g.meta));
    if (range_sq) range_sq[q.group] = group_range_sq(p, q.at.len, bits);
  }

  // The codes, a round at a time; stochastic rounding reads the round's noise from shared memory.
  const int64_t warp_begin = __shfl_sync(kFullWarp, q.at.start, 0);
  const int64_t warp_end = __shfl_sync(kFullWarp, q.at.start + q.at.len, q.last_lead);
  const bool stochastic = rounding == Rounding::Stochastic;
  uint32_t* words = noise_words[warp_here];
  for (int64_t r = 0; r < rounds; ++r) {  // the same trip count on every lane
    const int64_t block = lane_block(q, lanes, r);
    if (r > 0) {
      n = lane_block_len(q, lanes, r);
      load_floats8(xg + 8 * block, n, v);  // a second read (L1 or L2) only for groups over 256
    }
    const NoiseRound nr = noise_round(round_elements(warp_begin, warp_end, lanes, r));
    if (stochastic) {
      __syncwarp();  // the last round's reads are done
      make_round_noise(noise, nr, lane, words);
      __syncwarp();
    }
    if (n > 0)
      quantize_lane_block(v, n, static_cast<uint64_t>(q.at.start + 8 * block), p, bits, nr,
                          stochastic ? words : nullptr, codes + q.at.code_offset + block * bits);
  }
}

}  // namespace

void launch_quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                            uint8_t* codes, uint8_t* meta, double* group_range_sq) {
  if (g.groups() == 0) return;
  const int lanes = quantize_lanes(g.group_size);
  const auto blocks = static_cast<unsigned>((quantize_warps(g, lanes) + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kThreadsPerBlock>>>(x, g, lanes, rounding, noise, codes, meta, group_range_sq);
  };
  switch (g.bits) {
    case 1:
      return launch(quantize_groups_kernel<1>);
    case 2:
      return launch(quantize_groups_kernel<2>);
    case 4:
      return launch(quantize_groups_kernel<4>);
    case 8:
      return launch(quantize_groups_kernel<8>);
    default:
      return launch(quantize_groups_kernel<0>);
  }
}

void launch_dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out) {
  launch_for_each_lane(g.groups(), lanes_log2(dequantize_lanes(g.group_size)),
                       DequantizeQuadsBody{codes, meta, g, out});
}

}  // namespace packrat::cuda
