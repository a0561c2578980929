#pragma once
// The staged quantize of an NHWC tensor's groups (quant/nhwc_tile.h stages a block's run in plain
// order) with a lane per Philox call: where groups are whole 128-element noise blocks
// (rounding_noise16: call 16 (e / 128) + e % 16 holds the noise of elements e, e + 16, ..., e + 112),
// lane s of a group's lanes takes exactly the 8 elements of one call, so that it draws its noise
// into registers (no shared noise words, no index arithmetic a value), and 8 / bits neighbouring
// lanes merge their codes into a byte by shuffles. The general kernel (group_quant_warp.h) gives a
// lane 32 consecutive values and shares the warp's noise through shared memory: on an H100 it
// issued about 89 instructions a value on NHWC tensors, at 0.31-0.33 of copy bandwidth.
// CUDA-free: the kernel (group_quant_cuda.cu) and the host tests (tests/quant/nhwc_quantize_test.cpp).
#include <cstdint>

#include "core/hd.h"
#include "quant/group_quant.h"
#include "quant/nhwc_tile.h"

namespace packrat {

// Whether g's groups can be quantized a Philox call a lane: groups of 128 to 1024 values in whole
// noise blocks (sizes and spans multiples of 128, so every group starts on one), and codes that
// never straddle a byte (1, 2, 4 or 8 bits).
PACKRAT_HD inline bool nhwc_call_lanes_quantizable(const GroupGeometry& g) {
  const bool byte_codes = g.bits == 1 || g.bits == 2 || g.bits == 4 || g.bits == 8;
  return byte_codes && g.group_size % 128 == 0 && g.group_size <= 1024 && g.span_len % 128 == 0;
}

// Lanes a group takes: 16 (one noise block a round) for groups of 128, else the warp (two).
PACKRAT_HD inline int call_lanes_per_group(const GroupGeometry& g) { return g.group_size == 128 ? 16 : 32; }
// Groups a block takes: a tile's worth (its run fills kNhwcTileFloats at most).
PACKRAT_HD inline int64_t nhwc_call_lanes_block_groups(const GroupGeometry& g) { return kNhwcTileFloats / g.group_size; }

// The element of its group that lane `sub` (of call_lanes_per_group) holds in round r (of
// group_size / (8 x lanes)) as its h-th value (h < 8): noise block 2 r + sub / 16, call sub % 16,
// half-word h of it. (The kernel's lanes 16-31 take their h in the order h ^ 1, for the banks.)
PACKRAT_HD inline int call_lane_element(int sub, int r, int h) {
  return 256 * r + 128 * (sub >> 4) + (sub & 15) + 16 * h;
}
// The Philox counter of that lane's call, the group starting at element `start` (a multiple of 128)
// of the stream.
PACKRAT_HD inline uint64_t call_lane_counter(int64_t start, int sub, int r) {
  return ((static_cast<uint64_t>(start + 256 * r + 128 * (sub >> 4)) >> 7) << 4) | static_cast<uint64_t>(sub & 15);
}

}  // namespace packrat
