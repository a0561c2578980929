#pragma once
// Per-group codes of a GPU's NHWC tensor in the tensor's logical (plain NCHW) order, the order the
// CPU's codes follow: a block of the CUDA quantize kernel takes consecutive groups, whose elements
// are one run [begin, end) of the plain order, and stages that run through shared memory. It reads
// the run from the NHWC buffer (a thread a pixel's 8 or 4 channels where the channels are a
// multiple of them, else an element; its whole share of loads in flight at once) into a tile in
// plain order, then quantizes the tile's groups with the warps of group_quant_warp.h. (The decode
// needs no tile: quant/group/nhwc_decode.h.) CUDA-free: the kernels (quant/cuda/group_quant_cuda.cu) and the host
// tests (tests/quant/nhwc_tile_test.cpp) run the same phases.
#include <cstdint>

#include "core/cuda/kernels/float_io.h"  // load_floats4
#include "core/hd.h"
#include "quant/group/group_quant.h"
#include "quant/group/group_quant_warp.h"

namespace packrat {

// The walks here are NHWC ones (CodecWalk with nhwc): samples of `channels` x `plane` elements,
// plain element (n, c, p) at buffer offset (n * plane + p) * channels + c.

// A quantize block's staged run: 32 KiB of shared memory, 8 channels of a plane of 1024, so that
// its reads are whole 32-byte sectors of each pixel (with 16 KiB, 4 channels, half sectors).
constexpr int kNhwcTileFloats = 8192;
constexpr int kNhwcBlockThreads = 256;  // 8 warps a block

// Whether the kernels can stage g's groups of an NHWC tensor: a block's groups fit the tile (groups
// of up to 1024 values) and a run covers 8 channels or more (planes of up to 1024), so that its
// reads are not one float per sector; the tensor's offsets fit 32 bits. Otherwise the codec reads
// a plain copy.
PACKRAT_HD inline bool nhwc_stageable(const GroupGeometry& g, const CodecWalk& w) {
  return g.group_size <= 1024 && w.plane > 0 && w.plane <= 1024 && g.numel < (int64_t{1} << 31);
}

// Groups a quantize block takes: 8 warps of quantize_warps' 32 / lanes groups each (at most 8192 values).
PACKRAT_HD inline int64_t nhwc_quantize_block_groups(int lanes) {
  return (kNhwcBlockThreads / kWarpLanes) * (kWarpLanes >> lanes_log2(lanes));
}

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

// A thread's place k = outer x inner_size + inner in a box it walks `step` places at a time, kept by
// additions (no division a place).
struct BoxCursor {
  uint32_t k, inner, outer, inner_size, step, step_inner, step_outer;
  PACKRAT_HD BoxCursor(uint32_t start, uint32_t inner_size_, uint32_t step_)
      : k(start), inner(start % inner_size_), outer(start / inner_size_), inner_size(inner_size_), step(step_),
        step_inner(step_ % inner_size_), step_outer(step_ / inner_size_) {}
  PACKRAT_HD void advance() {
    k += step;
    inner += step_inner;
    outer += step_outer;
    if (inner >= inner_size) {
      inner -= inner_size;
      ++outer;
    }
  }
};

// fn(base, a, b) for each sample the run touches: the sample's first element `base` (the same
// offset in plain order and in NHWC) and the run's part of it, [a, b) in the sample's plain order.
template <class Fn>
PACKRAT_HD inline void for_nhwc_run_samples(const CodecWalk& w, ElementRun run, Fn&& fn) {
  const int64_t per_sample = w.channels * w.plane;
  for (int64_t n = run.begin / per_sample; n * per_sample < run.end; ++n) {
    const int64_t base = n * per_sample;
    const int64_t a = (run.begin > base ? run.begin : base) - base;
    const int64_t b = (run.end < base + per_sample ? run.end : base + per_sample) - base;
    fn(base, a, b);
  }
}

// Thread t's elements of `run` in batches of kNhwcBatch: fn(i, at, inside) with, for j < kNhwcBatch
// where inside[j], plain element run.begin + i[j] at buffer offset at[j]. Per sample, the threads
// walk the box of the run's channels by its pixels, channels innermost, and skip what lies outside
// the run (a partial first or last channel). A thread's position in the box advances by additions
// (no division an element), and a batch's offsets are all known before fn reads any of them, so a
// thread has a batch of loads in flight at once: one at a time, staging ran at 0.16 of copy
// bandwidth on an H100 (CodecCuda/GroupNhwcPerPlane/...:0), waiting on each load's latency.
constexpr int kNhwcBatch = 8;
template <class Fn>
PACKRAT_HD inline void for_nhwc_run(const CodecWalk& w, ElementRun run, int t, int threads, Fn&& fn) {
  for_nhwc_run_samples(w, run, [&](int64_t base, int64_t a, int64_t b) {
    const int64_t c_lo = a / w.plane;
    const auto nc = static_cast<uint32_t>((b - 1) / w.plane - c_lo + 1);
    const int64_t p_lo = nc == 1 ? a % w.plane : 0;  // one channel: its pixels only
    const auto box = nc * static_cast<uint32_t>(nc == 1 ? b - a : w.plane);
    BoxCursor at_k(static_cast<uint32_t>(t), nc, static_cast<uint32_t>(threads));  // inner: channel, outer: pixel
    while (at_k.k < box) {
      int64_t i[kNhwcBatch], at[kNhwcBatch];  // (batch) plain index in the run, buffer offset
      bool inside[kNhwcBatch];                // (batch)
      PACKRAT_UNROLL
      for (int j = 0; j < kNhwcBatch; ++j) {
        const int64_t c = c_lo + at_k.inner, p = p_lo + at_k.outer, e = c * w.plane + p;  // e: plain, in the sample
        inside[j] = at_k.k < box && e >= a && e < b;
        i[j] = base + e - run.begin;
        at[j] = base + p * w.channels + c;
        at_k.advance();
      }
      fn(i, at, inside);
    }
  });
}

// Where the channels are a multiple of 4, a pixel's channels are read and written W at a time, W =
// nhwc_vector_width: 8 (two 16-byte accesses, one whole 32-byte sector) where the channels are a
// multiple of 8, else 4 (a 16-byte quad). Thread t's vectors of `run` in batches of
// kNhwcVectorBatch<W>, fn(base, e, at, inside): for j < kNhwcVectorBatch<W>, the vector at buffer
// offset base + at[j] holds the sample's plain elements e[j] + r x plane (r < W; plain element
// base + e of the tensor) where bit r of inside[j] is set. Per sample, the threads walk the box of
// the run's vectors and pixels, pixels innermost for staging: a warp's tile accesses for one r are
// then consecutive (no bank conflicts; with channels innermost, 32 channels of a pixel lay a plane
// apart in the tile, in one bank when the plane is a multiple of 32, and staging ran at 0.22 of
// copy on an H100); vectors innermost where kChannelsInner (the decode, which has no tile: a warp's
// buffer accesses are then consecutive). With quads, the other half of each 32-byte sector a
// thread reads is the next quad's, another block's where a run covers 4 channels (planes of 1024).
// Offsets within a sample are 32-bit (nhwc_stageable), and a run of whole vectors of whole
// channels skips the per-element bounds.
template <int W>
constexpr int kNhwcVectorBatch = 32 / W;  // 32 floats in flight a thread: its whole share of a tile
PACKRAT_HD inline int nhwc_vector_width(const CodecWalk& w) {
  return w.channels % 8 == 0 ? 8 : w.channels % 4 == 0 ? 4 : 1;
}
template <int W, bool kChannelsInner = false, class Fn>
PACKRAT_HD inline void for_nhwc_vectors(const CodecWalk& w, ElementRun run, int t, int threads, Fn&& fn) {
  constexpr int kBatch = kNhwcVectorBatch<W>;
  constexpr unsigned kAll = (1u << W) - 1u;
  const auto plane = static_cast<int32_t>(w.plane), channels = static_cast<int32_t>(w.channels);
  for_nhwc_run_samples(w, run, [&](int64_t base, int64_t a64, int64_t b64) {
    const auto a = static_cast<int32_t>(a64), b = static_cast<int32_t>(b64);
    const int32_t c_lo = a / plane, c_hi = (b - 1) / plane, v_lo = c_lo / W;
    const bool whole = a == c_lo * plane && b == (c_hi + 1) * plane && c_lo % W == 0 && (c_hi + 1) % W == 0;
    const auto nv = static_cast<uint32_t>(c_hi / W - v_lo + 1);
    const int32_t p_lo = c_lo == c_hi ? a % plane : 0;  // one channel: its pixels only
    const auto np = static_cast<uint32_t>(c_lo == c_hi ? b - a : plane);
    const auto box = nv * np;
    BoxCursor at_k(static_cast<uint32_t>(t), kChannelsInner ? nv : np, static_cast<uint32_t>(threads));
    while (at_k.k < box) {
      int32_t e[kBatch], at[kBatch];  // (batch) the vector's first plain element, its offset
      unsigned inside[kBatch];        // (batch) a bit a channel of the vector
      PACKRAT_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const uint32_t vector = kChannelsInner ? at_k.inner : at_k.outer, pixel = kChannelsInner ? at_k.outer : at_k.inner;
        const int32_t c = W * (v_lo + static_cast<int32_t>(vector)), p = p_lo + static_cast<int32_t>(pixel);
        e[j] = c * plane + p;
        at[j] = p * channels + c;
        inside[j] = at_k.k < box ? kAll : 0u;
        if (!whole) {
          PACKRAT_UNROLL
          for (int r = 0; r < W; ++r)
            if (e[j] + r * plane < a || e[j] + r * plane >= b) inside[j] &= ~(1u << r);
        }
        at_k.advance();
      }
      fn(base, e, at, inside);
    }
  });
}

// tile[i] = the run's plain element i, read from the NHWC buffer src with vectors of W channels.
template <int W>
PACKRAT_HD inline void nhwc_stage_vectors(const CodecWalk& w, ElementRun run, const float* src, float* tile, int t,
                                          int threads) {
  constexpr int kBatch = kNhwcVectorBatch<W>;
  for_nhwc_vectors<W>(w, run, t, threads, [&](int64_t base, const int32_t* e, const int32_t* at, const unsigned* inside) {
    const float* sample = src + base;        // (plane, channels)
    const int64_t shift = base - run.begin;  // the sample's plain element e at tile[shift + e]
    float v[kBatch][W] = {};                 // (batch, channel of the vector) every load before any store
    PACKRAT_UNROLL
    for (int j = 0; j < kBatch; ++j)
      if (inside[j]) {  // a whole vector lies in the sample's buffer
        PACKRAT_UNROLL
        for (int h = 0; h < W; h += 4) load_floats4(sample + at[j] + h, 4, v[j] + h);
      }
    PACKRAT_UNROLL
    for (int j = 0; j < kBatch; ++j)
      PACKRAT_UNROLL
      for (int r = 0; r < W; ++r)
        if (inside[j] >> r & 1u) tile[shift + e[j] + r * w.plane] = v[j][r];
  });
}
// tile[i] = the run's plain element i, read from the NHWC buffer src (this thread's share).
PACKRAT_HD inline void nhwc_stage(const CodecWalk& w, ElementRun run, const float* src, float* tile, int t,
                                  int threads) {
  switch (nhwc_vector_width(w)) {
    case 8:
      return nhwc_stage_vectors<8>(w, run, src, tile, t, threads);
    case 4:
      return nhwc_stage_vectors<4>(w, run, src, tile, t, threads);
    default:
      break;
  }
  for_nhwc_run(w, run, t, threads, [&](const int64_t* i, const int64_t* at, const bool* inside) {
    float v[kNhwcBatch];  // (batch) every load issued before the first store
    PACKRAT_UNROLL
    for (int j = 0; j < kNhwcBatch; ++j) v[j] = inside[j] ? src[at[j]] : 0.0f;
    PACKRAT_UNROLL
    for (int j = 0; j < kNhwcBatch; ++j)
      if (inside[j]) tile[i[j]] = v[j];
  });
}

}  // namespace packrat
