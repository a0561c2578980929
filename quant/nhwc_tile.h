#pragma once
// Per-group codes of a GPU's NHWC tensor in the tensor's logical (plain NCHW) order, the order the
// CPU's codes follow: a block of the CUDA kernels takes consecutive groups, whose elements are one
// run [begin, end) of the plain order, and stages that run through shared memory. It reads the run
// from the NHWC buffer channels innermost (consecutive threads on consecutive channels of one
// pixel, so that a warp reads whole sectors where the run covers 8 channels or more) into a tile
// in plain order, then quantizes the tile's groups with the warps of group_quant_warp.h; or it
// decodes the groups into the tile (the gradient staged there first for an activation's backward)
// and writes the tile back to NHWC. CUDA-free: the kernels (group_quant_cuda.cu) and the host
// tests (tests/quant/nhwc_tile_test.cpp) run the same phases.
#include <cstdint>

#include "core/hd.h"
#include "quant/apply_derivative_sink.h"
#include "quant/group_quant.h"
#include "quant/group_quant_warp.h"

namespace packrat {

// An NHWC buffer seen in plain order: samples of `channels` x `plane` elements, plain element
// (n, c, p) at buffer offset (n * plane + p) * channels + c.
struct NhwcWalk {
  int64_t channels = 0, plane = 0;  // 0: not an NHWC walk
};

constexpr int kNhwcTileFloats = 4096;  // a block's staged run: 16 KiB of shared memory
constexpr int kNhwcBlockThreads = 128;  // 4 warps a block

// Whether the kernels can stage g's groups of an NHWC tensor: a block's groups fit the tile (groups
// of up to 1024 values) and a run covers 4 channels or more (planes of up to 1024), so that its
// reads are not one float per sector. Otherwise the codec reads a plain copy.
PACKRAT_HD inline bool nhwc_stageable(const GroupGeometry& g, const NhwcWalk& w) {
  return g.group_size <= 1024 && w.plane > 0 && w.plane <= 1024;
}

// Groups a quantize block takes: 4 warps of quantize_warps' 32 / lanes groups each (at most 4096 values).
PACKRAT_HD inline int64_t nhwc_quantize_block_groups(int lanes) {
  return (kNhwcBlockThreads / kWarpLanes) * (kWarpLanes >> lanes_log2(lanes));
}
// Groups a decode block takes: as many whole groups as the tile holds (4 or more).
PACKRAT_HD inline int64_t nhwc_decode_block_groups(const GroupGeometry& g) { return kNhwcTileFloats / g.group_size; }

// The groups [first, first + count) of block `block` taking `per_block` groups, and their plain run.
struct NhwcBlock {
  int64_t first = 0, count = 0;
  ElementRun run{0, 0};
};
PACKRAT_HD inline NhwcBlock nhwc_block(const GroupGeometry& g, int64_t per_block, int64_t block) {
  NhwcBlock b;
  b.first = block * per_block;
  const int64_t left = g.groups() - b.first;
  b.count = left < per_block ? left : per_block;
  if (b.count <= 0) return b;
  const GroupGeometry::Place last = g.place(b.first + b.count - 1);
  b.run = {g.place(b.first).start, last.start + last.len};
  return b;
}

// fn(i, offset) for the elements of `run` that thread t of `threads` takes: plain element
// run.begin + i lies at buffer offset `offset`. Per sample, the threads walk the box of the run's
// channels by its pixels, channels innermost, and skip what lies outside the run (a partial first
// or last channel).
template <class Fn>
PACKRAT_HD inline void for_nhwc_run(const NhwcWalk& w, ElementRun run, int t, int threads, Fn&& fn) {
  const int64_t per_sample = w.channels * w.plane;
  for (int64_t n = run.begin / per_sample; n * per_sample < run.end; ++n) {
    const int64_t base = n * per_sample;
    const int64_t a = (run.begin > base ? run.begin : base) - base;  // the run within the sample: [a, b)
    const int64_t b = (run.end < base + per_sample ? run.end : base + per_sample) - base;
    const int64_t c_lo = a / w.plane;
    const auto nc = static_cast<uint32_t>((b - 1) / w.plane - c_lo + 1);
    const int64_t p_lo = nc == 1 ? a % w.plane : 0;  // one channel: its pixels only
    const auto box = nc * static_cast<uint32_t>(nc == 1 ? b - a : w.plane);
    for (auto k = static_cast<uint32_t>(t); k < box; k += static_cast<uint32_t>(threads)) {
      const int64_t c = c_lo + k % nc, p = p_lo + k / nc;
      const int64_t e = c * w.plane + p;  // plain, within the sample
      if (e >= a && e < b) fn(base + e - run.begin, (base / w.channels + p) * w.channels + c);
    }
  }
}

// tile[i] = the run's plain element i, read from the NHWC buffer src (this thread's share).
PACKRAT_HD inline void nhwc_stage(const NhwcWalk& w, ElementRun run, const float* src, float* tile, int t,
                                  int threads) {
  for_nhwc_run(w, run, t, threads, [&](int64_t i, int64_t at) { tile[i] = src[at]; });
}
// The run's plain element i = tile[i], written to the NHWC buffer dst (this thread's share).
PACKRAT_HD inline void nhwc_unstage(const NhwcWalk& w, ElementRun run, const float* tile, float* dst, int t,
                                    int threads) {
  for_nhwc_run(w, run, t, threads, [&](int64_t i, int64_t at) { dst[at] = tile[i]; });
}

// A decode sink retargeted at a tile holding the plain elements from `shift` on.
template <class Sink>
struct ShiftedSink {
  Sink sink;
  int64_t shift;
  PACKRAT_HD void operator()(float* v, int n, int64_t at) const { sink(v, n, at - shift); }
};

// The sink's twin on a tile: values stored there, or the gradient read from and gx written to it.
PACKRAT_HD inline StoreValues on_tile(const StoreValues&, float* tile) { return {tile}; }
template <class A, bool FromOutput>
PACKRAT_HD inline ApplyDerivative<A, FromOutput> on_tile(const ApplyDerivative<A, FromOutput>&, float* tile) {
  return {tile, tile};
}

// Thread t's share of decoding a block's groups with `body` (DequantizeQuadsBody over a
// ShiftedSink): dequantize_lanes(G) lanes a group, the block's threads over its groups in rounds.
template <class Body>
PACKRAT_HD inline void nhwc_decode_groups(const GroupGeometry& g, const NhwcBlock& b, const Body& body, int t,
                                          int threads) {
  const int shift = lanes_log2(dequantize_lanes(g.group_size)), lanes = 1 << shift;
  for (int64_t i = t >> shift; i < b.count; i += threads >> shift) body(b.first + i, t & (lanes - 1), lanes);
}

}  // namespace packrat
