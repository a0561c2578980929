// The per-group codec's CUDA kernels over the PACKRAT_HD helpers of group_quant.h, so that a
// GPU writes the CPU's bytes (same Philox draws, same rounding, same packing).
#include <cuda_runtime.h>

#include "core/cuda/launch.cuh"
#include "quant/group_quant_device.h"
#include "quant/warp_range.cuh"

namespace packrat::cuda {

namespace {

// One warp per group: its range (each lane scans a stride, then the lanes combine), its
// metadata record, then its blocks of 8 codes across the lanes. Every lane computes the same
// parameters from the same range, so none is broadcast.
__global__ void quantize_groups_kernel(const float* x, GroupGeometry g, Rounding rounding, QuantNoise noise,
                                       uint8_t* codes, uint8_t* meta, double* range_sq) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t group = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (group >= g.groups()) return;  // the whole warp: one group per warp
  const int64_t len = g.group_len(group), start = g.group_start(group);
  const float* xg = x + start;  // (len)
  float mn, mx;
  warp_range(xg, len, lane, mn, mx);
  const GroupParams p = group_params(mn, mx, g.bits, g.meta);
  if (lane == 0) {
    store_group_meta(p, g.meta, meta + group * meta_bytes_per_group(g.meta));
    if (range_sq) range_sq[group] = group_range_sq(p, len, g.bits);
  }
  uint8_t* group_codes = codes + g.group_code_offset(group);
  for (int64_t block = lane; 8 * block < len; block += 32)
    quantize_block8(xg, len, block, static_cast<uint64_t>(start), p, g.bits, rounding, noise, group_codes);
}

}  // namespace

void launch_quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                            uint8_t* codes, uint8_t* meta, double* group_range_sq) {
  if (g.groups() == 0) return;
  constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;
  const int64_t blocks = (g.groups() + kWarpsPerBlock - 1) / kWarpsPerBlock;
  quantize_groups_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(x, g, rounding, noise, codes, meta,
                                                                              group_range_sq);
}

void launch_dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out) {
  launch_for_each(g.groups() * g.blocks_per_group(), DequantizeBlockBody{codes, meta, g, out});
}

}  // namespace packrat::cuda
