#pragma once
// Per-group codes of a GPU tensor with each thread's values in registers from their loads to their
// codes: the "quads" quantize, the default wherever its plan takes the shape since an H200 timed it
// faster than the staged NHWC kernel (quant/group/nhwc_tile.h) and the warp-a-group plain one
// (group_quant_warp.h), which PACKRAT_QUANTIZE=staged still picks (group_quant_cuda.cu has the
// figures). Written for NHWC tensors in plain order; a plain tensor
// takes the same phases with a simpler box (plain_quad_plan).
//
// Why. The staged kernel reads a block's run into a plain-order tile (a transpose through shared
// memory), waits at a barrier, then quantizes the tile's groups by warps: on an H100 it ran at
// 0.31-0.33 of copy bandwidth, issue-bound (about 89 instructions a value, 80 registers with
// spills, 36% occupancy, DRAM 23%), while the decode in tiles of 4 pixels x 4 channels
// (quant/group/nhwc_decode.h) reached 0.86-0.89. This kernel takes the decode's shape the other way.
//
// How. A block takes a run of k "quad planes" (4 channels x a whole plane of one sample: 4 k P
// consecutive plain elements, at most 8192) and a thread one box of 4 channels x 8 pixels: 8
// float4 loads of one pixel's 4 channels each, which hold 4 plain blocks of 8 (one a channel),
// kept in registers from the load to the codes. Threads take the quads innermost, so a warp's
// load of one pixel row reads whole 32-byte sectors where k >= 2. Three phases, two barriers:
//   A  each box's blocks: their range (RangeScan), first value and first zero into shared memory
//      (QuadShared); meanwhile the block's rounding noise (the run's noise words, one in 2
//      values) into shared memory, as the warps of group_quant_warp.h make theirs;
//   B  each group's range from its blocks' (lanes = quantize_lanes(G) threads a group, merged by
//      shuffles in the kernel, in any order: RangeScan gives the CPU's), its metadata and
//      range_sq, and its (min, 1 / step) written over its blocks' ranges;
//   C  each box's 4 blocks quantized from registers with their group's parameters and the shared
//      noise: one 8-code block word each, at codes + (element / 8) x bits (groups of whole blocks
//      tile the code stream densely).
// Taken where the channels come in fours, planes in eights (up to 2048), groups in whole blocks
// whose edges fall on the runs' (nhwc_quad_plan), and for a plain tensor where runs of a multiple
// of 32 values divide it on group edges; otherwise the staged or warp-a-group kernel runs. CUDA-free:
// the kernel (group_quant_cuda.cu) and the host test (tests/quant/quad_quantize_test.cpp)
// run the same phases.
#include <cmath>
#include <cstdint>

#include "core/hd.h"
#include "quant/bits/block_io.h"
#include "quant/group/group_quant.h"
#include "quant/group/group_quant_warp.h"

namespace packrat {

constexpr int kQuadRunValues = 8192;                // a block's run at most
constexpr int kQuadRunBlocks = kQuadRunValues / 8;  // its plain blocks of 8
constexpr int kQuadBoxThreads = 256;                // a block's threads: one box each, at most
// Shared words of a run's noise (its 4097 words at most, shared_noise_index's places).
constexpr int kQuadNoiseWords = noise_shared_words(kQuadRunValues);

// How a tensor's runs and boxes lie; quads_per_run 0: the kernel cannot take it. channels 0: a
// plain tensor (plain_quad_plan), whose box blocks lie `plane` elements apart.
struct QuadPlan {
  int32_t channels = 0, plane = 0;
  int32_t pixel_blocks = 0;   // plane / 8: a plane's boxes for one quad
  int32_t quads_per_run = 0;  // k
  int32_t lanes = 1;          // threads a group's range takes in phase B (quantize_lanes(G))
  int64_t runs = 0;           // blocks of the launch
  PACKRAT_HD int32_t run_values() const { return 4 * quads_per_run * plane; }
  PACKRAT_HD int32_t boxes() const { return quads_per_run * pixel_blocks; }
};

// The plan for g's groups of an NHWC tensor (w.nhwc): the most quads a run that keep it within
// kQuadRunValues, divide a sample's quads (a run holds whole quad planes of one sample) and put
// the runs' edges on group edges; none where the channels are not a multiple of 4, the plane not
// one of 8 (a box's blocks would straddle channels), the groups not whole blocks (every group edge
// a multiple of 8), or the tensor has 2^31 values or more (32-bit offsets).
inline QuadPlan nhwc_quad_plan(const GroupGeometry& g, const CodecWalk& w) {
  QuadPlan p;
  if (!w.nhwc || w.channels <= 0 || w.channels % 4 != 0 || w.plane <= 0 || w.plane % 8 != 0 ||
      4 * w.plane > kQuadRunValues || g.groups() == 0 || g.numel >= (int64_t{1} << 31) || g.group_size % 8 != 0 ||
      g.span_len % 8 != 0 || g.numel % (w.channels * w.plane) != 0)
    return p;
  const int64_t quads = w.channels / 4;
  for (int64_t k = kQuadRunValues / (4 * w.plane); k >= 1; --k) {
    const int64_t run = 4 * k * w.plane;
    const bool edges_are_group_edges = run % g.span_len == 0 || (g.span_len % run == 0 && run % g.group_size == 0);
    if (quads % k != 0 || !edges_are_group_edges) continue;
    p.channels = static_cast<int32_t>(w.channels);
    p.plane = static_cast<int32_t>(w.plane);
    p.pixel_blocks = static_cast<int32_t>(w.plane / 8);
    p.quads_per_run = static_cast<int32_t>(k);
    p.lanes = quantize_lanes(g.group_size);
    p.runs = g.numel / run;
    return p;
  }
  return p;
}

// The plan for g's groups of a tensor as it lies (a GPU's plain buffer: linear layers, NCHW): the
// NHWC plan's phases with one "quad" a run of R values whose box blocks lie R / 4 apart, so that
// thread t's box is the run's blocks t, t + R/32, t + R/16 and t + 3R/32, and a warp's two float4
// loads of one of them read 32 consecutive blocks (1 KiB). R: the most, at most kQuadRunValues and
// a multiple of 32, that divides the tensor and puts the runs' edges on group edges; none where the
// groups are not whole blocks or the tensor has 2^31 values or more.
inline QuadPlan plain_quad_plan(const GroupGeometry& g) {
  QuadPlan p;
  if (g.groups() == 0 || g.numel >= (int64_t{1} << 31) || g.group_size % 8 != 0 || g.span_len % 8 != 0) return p;
  for (int64_t run = kQuadRunValues; run >= 32; run -= 32) {
    const bool edges_are_group_edges = run % g.span_len == 0 || (g.span_len % run == 0 && run % g.group_size == 0);
    if (g.numel % run != 0 || !edges_are_group_edges) continue;
    p.plane = static_cast<int32_t>(run / 4);
    p.pixel_blocks = static_cast<int32_t>(run / 32);
    p.quads_per_run = 1;
    p.lanes = quantize_lanes(g.group_size);
    p.runs = g.numel / run;
    return p;
  }
  return p;
}

// Run r's plain elements.
PACKRAT_HD inline ElementRun quad_run(const QuadPlan& p, int64_t r) {
  return {r * p.run_values(), (r + 1) * p.run_values()};
}

// Thread t's box of run r: channels 4q .. 4q + 3 of sample n, pixels 8 pb .. 8 pb + 7, with the
// run's quad dq = t % k and pb = t / k (quads innermost). Its channel j's block is the plain
// elements e0 + j x plane .. + 7, the run's block `block` + j x pixel_blocks.
struct QuadBox {
  bool active = false;  // t < boxes()
  int32_t at = 0;       // buffer offset of pixel 8 pb's channel 4q
  int32_t e0 = 0;       // plain element of channel 4q's block
  int32_t block = 0;    // channel 4q's block in the run
};
PACKRAT_HD inline QuadBox quad_box(const QuadPlan& p, int64_t r, int t) {
  QuadBox b;
  if (t >= p.boxes()) return b;
  if (p.channels == 0) {  // plain: the run's blocks t, t + pixel_blocks, ... (plain_quad_plan)
    b.active = true;
    b.e0 = static_cast<int32_t>(r * p.run_values()) + 8 * t;
    b.at = b.e0;
    b.block = t;
    return b;
  }
  const int32_t dq = t % p.quads_per_run, pb = t / p.quads_per_run;
  const auto quad_plane = static_cast<int32_t>(r * p.quads_per_run + dq);  // over all samples
  const int32_t quads = p.channels / 4, n = quad_plane / quads, q = quad_plane - n * quads;
  b.active = true;
  b.at = (n * p.plane + 8 * pb) * p.channels + 4 * q;
  b.e0 = quad_plane * 4 * p.plane + 8 * pb;
  b.block = 4 * dq * p.pixel_blocks + pb;
  return b;
}

// The box's values, v[j][i] = channel 4q + j at pixel 8 pb + i: 8 loads of 4 channels, all issued
// before any is used.
PACKRAT_HD inline void load_quad_box(const float* x, const QuadPlan& p, const QuadBox& b, float (&v)[4][8]) {
  if (p.channels == 0) {  // plain: each block's 8 values, two float4 loads
    PACKRAT_UNROLL
    for (int j = 0; j < 4; ++j) load_floats8(x + b.at + j * p.plane, 8, v[j]);
    return;
  }
  float row[8][4];  // (pixel, channel)
  PACKRAT_UNROLL
  for (int i = 0; i < 8; ++i) load_floats4(x + b.at + i * p.channels, 4, row[i]);
  PACKRAT_UNROLL
  for (int i = 0; i < 8; ++i)
    PACKRAT_UNROLL
    for (int j = 0; j < 4; ++j) v[j][i] = row[i][j];
}

// A block's shared memory. Block b's entries lie at swizzled places: its index with the low bits
// XOR-ed with higher ones (a bijection of [0, 1024)), so that a warp's accesses in phases A and C,
// whose blocks lie a quad's or a pixel block's stride apart, fall in distinct banks: none conflict
// for planes of 8 to 2048 where a run takes the most quads (8192 values), at most 4 ways where it
// takes fewer, against up to 16 (8-byte pairs) and 32 ways (4-byte values) with the plain index
// (tests/quant/quad_quantize_test.cpp counts them); phase B's reads stay at most 2-way.
struct QuadShared {
  struct alignas(8) Pair {
    float a, b;  // phase A: the block's (min, max); after phase B: its group's (min, 1 / step)
  };
  Pair pairs[kQuadRunBlocks];
  float firsts[kQuadRunBlocks];     // the block's first value
  uint8_t zeros[kQuadRunBlocks];    // its first zero: 2 x index + sign bit; kNoZeroByte: none
  uint32_t noise[kQuadNoiseWords];  // the run's rounding noise (shared_noise_index's places)

  PACKRAT_HD static int pair_slot(int b) { return b ^ (((b >> 4) ^ (b >> 6) ^ (b >> 9)) & 15); }  // 16 a bank row
  PACKRAT_HD static int word_slot(int b) { return b ^ (((b >> 5) ^ (b >> 7) ^ (b >> 10)) & 31); }  // 32 a bank row
  PACKRAT_HD Pair& range(int b) { return pairs[pair_slot(b)]; }
  PACKRAT_HD const Pair& range(int b) const { return pairs[pair_slot(b)]; }
  PACKRAT_HD float& first(int b) { return firsts[word_slot(b)]; }
  PACKRAT_HD float first(int b) const { return firsts[word_slot(b)]; }
  PACKRAT_HD uint8_t& zero(int b) { return zeros[word_slot(b)]; }
  PACKRAT_HD uint8_t zero(int b) const { return zeros[word_slot(b)]; }
};
constexpr uint8_t kNoZeroByte = 0xFF;

// Phase A: the box's 4 blocks' ranges, first values and first zeros.
PACKRAT_HD inline void keep_box_ranges(const float (&v)[4][8], const QuadPlan& p, const QuadBox& b,
                                       QuadShared& s) {
  PACKRAT_UNROLL
  for (int j = 0; j < 4; ++j) {
    RangeScan scan(v[j][0]);
    scan.keep(v[j], 8);
    const int block = b.block + j * p.pixel_blocks;
    s.range(block) = {scan.mn, scan.mx};
    s.first(block) = v[j][0];
    const uint64_t z = first_zero_in(v[j], 8, 0);
    s.zero(block) = z == kNoZero ? kNoZeroByte : static_cast<uint8_t>(z);
  }
}

// ---- phase B: the groups ---------------------------------------------------------------------

// The run's groups [first, first + count) (its edges are group edges: nhwc_quad_plan).
struct QuadRunGroups {
  int64_t first = 0, count = 0;
};
PACKRAT_HD inline int64_t group_of_element(const GroupGeometry& g, int64_t e) {
  const int64_t span = GroupGeometry::div_nonneg(e, g.span_len);
  return span * g.groups_per_span + GroupGeometry::div_nonneg(e - span * g.span_len, g.group_size);
}
PACKRAT_HD inline QuadRunGroups quad_run_groups(const GroupGeometry& g, const ElementRun& run) {
  const int64_t first = group_of_element(g, run.begin);
  return {first, group_of_element(g, run.end - 1) - first + 1};
}

// Group `group`'s blocks in the run: [b0, b0 + blocks).
struct QuadGroup {
  int64_t group = 0;
  int32_t b0 = 0, blocks = 0;
};
PACKRAT_HD inline QuadGroup quad_group(const GroupGeometry& g, const ElementRun& run, int64_t group) {
  const GroupGeometry::Place at = g.place(group);
  return {group, static_cast<int32_t>((at.start - run.begin) >> 3), static_cast<int32_t>(at.len >> 3)};
}

// Phase B's threads: teams of p.lanes threads take the run's groups, a group a team a round.
// Thread t in round r works on group i = r x teams + t / lanes of the run (none past the last) as
// its lane `sub`; every thread runs every round, so that the kernel's shuffles take whole warps.
struct QuadTeamLane {
  int64_t i = 0;  // the group, among the run's
  int sub = 0;    // the thread's lane among the group's
  bool active = false;
};
PACKRAT_HD inline int64_t quad_team_rounds(const QuadPlan& p, const QuadRunGroups& groups) {
  const int64_t teams = kQuadBoxThreads / p.lanes;
  return (groups.count + teams - 1) / teams;
}
PACKRAT_HD inline QuadTeamLane quad_team_lane(const QuadPlan& p, const QuadRunGroups& groups, int64_t round,
                                              int t) {
  const int shift = lanes_log2(p.lanes);
  QuadTeamLane l;
  l.i = round * (kQuadBoxThreads >> shift) + (t >> shift);
  l.sub = t & (p.lanes - 1);
  l.active = l.i < groups.count;
  return l;
}

// One lane's share of a group's range: its blocks sub, sub + lanes, ... (identities where none);
// first_zero: 2 x (element in the group) + sign of the first zero among them, ~0u where none.
struct GroupRangePart {
  float mn = INFINITY, mx = -INFINITY;
  uint32_t first_zero = ~0u;
};
PACKRAT_HD inline GroupRangePart merge_parts(const GroupRangePart& a, const GroupRangePart& b) {
  return {fminf(a.mn, b.mn), fmaxf(a.mx, b.mx), a.first_zero < b.first_zero ? a.first_zero : b.first_zero};
}
PACKRAT_HD inline GroupRangePart group_range_part(const QuadShared& s, const QuadGroup& grp, int sub, int lanes) {
  GroupRangePart part;
  for (int32_t k = sub; k < grp.blocks; k += lanes) {
    const QuadShared::Pair r = s.range(grp.b0 + k);
    const uint8_t z = s.zero(grp.b0 + k);
    part = merge_parts(part, {r.a, r.b, z == kNoZeroByte ? ~0u : 16u * static_cast<uint32_t>(k) + z});
  }
  return part;
}
// The group's parameters from its merged parts: the CPU's range (RangeScan's settlement of a zero
// extreme's sign and of a NaN first value).
PACKRAT_HD inline GroupParams settle_quad_group(const QuadShared& s, const QuadGroup& grp,
                                                const GroupRangePart& all, int bits, MetaType meta) {
  RangeScan range(s.first(grp.b0));
  range.mn = fminf(range.mn, all.mn);
  range.mx = fmaxf(range.mx, all.mx);
  if (range.ends_in_zero()) range.settle_zero(all.first_zero);
  range.finish();
  return group_params(range.mn, range.mx, bits, meta);
}
// The lane's blocks of the group take its (min, 1 / step) for phase C.
PACKRAT_HD inline void keep_group_params(QuadShared& s, const QuadGroup& grp, int sub, int lanes,
                                         const GroupParams& p) {
  for (int32_t k = sub; k < grp.blocks; k += lanes) s.range(grp.b0 + k) = {p.min, p.inv_step};
}

// ---- phase C: the codes --------------------------------------------------------------------

// The box's 4 blocks' codes, rounded with the run's shared noise (null: to nearest): each block
// as a warp's lane quantizes one (quantize_lane_block), its bytes at codes + (element / 8) x bits.
PACKRAT_HD inline void quantize_quad_box(const float (&v)[4][8], const QuadPlan& p, const QuadBox& b, int bits,
                                         const NoiseChunk& nc, const QuadShared& s, const uint32_t* noise,
                                         uint8_t* codes) {
  PACKRAT_UNROLL
  for (int j = 0; j < 4; ++j) {
    const QuadShared::Pair r = s.range(b.block + j * p.pixel_blocks);
    const GroupParams params{r.a, 0.0f, r.b};  // quantize_value reads min and inv_step
    // A multiple of 8 (plane % 8 == 0, nhwc_quad_plan), said so that the compiler drops
    // chunk_noise16_block8's element-by-element path for blocks on an odd element.
    const uint64_t e = static_cast<uint64_t>(b.e0 + j * p.plane) & ~uint64_t{7};
    quantize_lane_block(v[j], 8, e, params, bits, nc, noise, codes + (e >> 3) * bits);
  }
}

}  // namespace packrat
