#pragma once
// The mixed and deterministic bucket codes of a GPU's NHWC tensor in the tensor's logical (plain
// NCHW) order, the order of the CPU's codes, in one pass each way as the per-group codec does:
// a block of the CUDA quantize kernel takes consecutive buckets, whose elements are one run of
// the plain order, stages the run through shared memory (quant/group/nhwc_tile.h) and quantizes each
// bucket there with one warp (quant/cuda/mixed_quant_cuda.cu); a block of the decode kernel copies its
// buckets' codes into shared memory beside a table of their widths and grids, and decodes each
// NHWC position from its own bucket's codes (quant/group/nhwc_decode.h's walk, with
// NhwcBucketDecoder). CUDA-free: the kernels and the host tests (tests/quant/nhwc_buckets_test.cpp)
// run the same phases.
#include <algorithm>
#include <cstdint>

#include "core/fast_div.h"
#include "core/hd.h"
#include "quant/bits/bitpack.h"  // packed_code_at
#include "quant/mixed/mixed_kernel_bodies.h"
#include "quant/group/nhwc_decode.h"
#include "quant/group/nhwc_tile.h"

namespace packrat {

// Whether the kernels take g's buckets of an NHWC tensor in plain order: buckets of up to 1024
// values (8 or more a staged run, one a warp at least), planes of up to 1024 (a run covers 8
// channels or more: nhwc_stageable's reasons) and offsets within 32 bits. Otherwise the codec
// reads and writes a plain copy.
PACKRAT_HD inline bool nhwc_buckets_stageable(const BucketGeometry& g, const CodecWalk& w) {
  return g.bucket_size <= 1024 && w.plane > 0 && w.plane <= 1024 && g.numel < (int64_t{1} << 31);
}

// Buckets a quantize block takes: a tile's worth (kNhwcTileFloats values; a bucket a warp, in
// turns where they are shorter than 1024).
PACKRAT_HD inline int64_t nhwc_quantize_block_buckets(const BucketGeometry& g) {
  return kNhwcTileFloats / g.bucket_size;
}

// The buckets [first, first + count) of block `block` taking `per_block`, and their plain run.
PACKRAT_HD inline NhwcBlock nhwc_bucket_block(const BucketGeometry& g, int64_t per_block, int64_t block) {
  NhwcBlock b;
  b.first = block * per_block;
  const int64_t left = g.buckets - b.first;
  b.count = left < per_block ? left : per_block;
  if (b.count <= 0) return b;
  const int64_t end = g.start(b.first + b.count - 1) + g.len(b.first + b.count - 1);
  b.run = {g.start(b.first), end};
  return b;
}

// ---- the decode ------------------------------------------------------------------------------

// A decode block's bucket, as its threads read it from shared memory (16 bytes): its codes' place
// in the block's copy, its width and its grid, so that an element's decode is a division, one
// table read and a code's one or two bytes (read from the tensor's buffers element by element,
// the decode took 186 registers and a stack frame).
struct alignas(16) NhwcBucketEntry {
  uint16_t code_at = 0;    // the bucket's first code byte in the block's copy (< kNhwcCodeBytes)
  uint16_t hi_at = 0;      // its high parts from code_at + hi_at on (its length; widths over 8 bits)
  uint16_t levels = 0;     // sign-magnitude: L (codes 0 .. 2L; at most 2^15 with 16-bit codes)
  uint8_t code_bits = 0;
  uint8_t unused = 0;
  float min = 0.0f;        // affine: the stored min
  float step = 0.0f;       // affine: the stored step; sign-magnitude: s / L
};
static_assert(sizeof(NhwcBucketEntry) == 16);
// Buckets a decode block's table holds: 4 KiB.
constexpr int kNhwcBucketTable = 256;

// *e, in one 16-byte load on a GPU (field by field, the decode's shared-memory reads were five an
// element, not one).
PACKRAT_HD inline NhwcBucketEntry load_entry(const NhwcBucketEntry* e) {
#if defined(__CUDA_ARCH__)
  const uint4 raw = *reinterpret_cast<const uint4*>(e);
  NhwcBucketEntry out;
  memcpy(&out, &raw, sizeof(out));
  return out;
#else
  return *e;
#endif
}

// Where a tensor's buckets are (global memory): the codes, metadata, held widths and code offsets.
struct NhwcBucketSource {
  const uint8_t* codes;
  const uint8_t* meta;
  MixedFormat f;
  BucketFlags flags;
  BucketOffsets offsets;
  FastDivU31 by_bucket;  // bucket_size (made on the host)
};
inline NhwcBucketSource nhwc_bucket_source(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f,
                                           const BucketFlags& flags, const BucketOffsets& offsets) {
  return {codes, meta, f, flags, offsets, FastDivU31(static_cast<uint32_t>(f.g.bucket_size))};
}

// Buckets a decode block takes: as many as kNhwcDecodeValues, the codes' copy at the wider width
// (16 bytes kept for the rounded begin) and the table allow, at least one (buckets of up to 1024
// values always fit: 2 KiB at 16 bits).
inline int64_t nhwc_decode_block_buckets(const MixedFormat& f) {
  const int widest = std::max(f.base.code_bits, f.mix.code_bits);
  const int64_t by_values = kNhwcDecodeValues / f.g.bucket_size;
  const int64_t by_codes = (kNhwcCodeBytes - 16) / packed_bytes(f.g.bucket_size, widest);
  return std::max<int64_t>(1, std::min({by_values, by_codes, int64_t{kNhwcBucketTable}}));
}

// The value of plain element x (< 2^31) of a block's run: its bucket by one multiplicative
// division, the bucket's entry, its code from the block's copy (a width over 8 bits: the low
// byte, then the high bits). The arithmetic of DequantizeBucketQuadsBody, so the floats are the
// CPU's.
struct NhwcBucketDecoder {
  const uint8_t* codes;          // the block's copy of the codes
  const NhwcBucketEntry* table;  // (the block's buckets,) from bucket `first` on
  uint32_t first = 0, bucket_size = 1;
  FastDivU31 by_bucket;          // bucket_size
  bool sign_magnitude = false;

  PACKRAT_HD float operator()(uint32_t x) const {
    const uint32_t bucket = by_bucket.div(x), at = x - bucket * bucket_size;
    const NhwcBucketEntry e = load_entry(table + (bucket - first));
    const int lo_bits = e.code_bits < 8 ? e.code_bits : 8, hi_bits = e.code_bits - lo_bits;
    uint32_t code = packed_code_at(codes + e.code_at, at, lo_bits);
    if (hi_bits) code |= packed_code_at(codes + e.code_at + e.hi_at, at, hi_bits) << 8;
    return value_of(code, e);
  }
  // The values of plain elements x .. x + 3, x a multiple of 4 in one bucket
  // (nhwc_buckets_quad_decodable): the bucket's entry read once, its codes of up to 8 bits from at
  // most 4 bytes; wider codes (low bytes and high parts apart) one by one.
  PACKRAT_HD void quad(uint32_t x, float* v) const {
    const uint32_t bucket = by_bucket.div(x), at = x - bucket * bucket_size;
    const NhwcBucketEntry e = load_entry(table + (bucket - first));
    if (e.code_bits > 8) {
      for (uint32_t k = 0; k < 4; ++k) v[k] = (*this)(x + k);
      return;
    }
    const uint32_t bit = at * e.code_bits;
    const uint32_t word = load_code_quad(codes + e.code_at + (bit >> 3), static_cast<int>(bit & 7), e.code_bits);
    const uint32_t mask = (1u << e.code_bits) - 1u;
    for (int k = 0; k < 4; ++k) v[k] = value_of((word >> (k * e.code_bits)) & mask, e);
  }
  // A code's value on its bucket's grid.
  PACKRAT_HD float value_of(uint32_t code, const NhwcBucketEntry& e) const {
    return sign_magnitude ? dequantize_sign_magnitude(code, e.step, e.levels)
                          : dequantize_value(code, GroupParams{e.min, e.step, 0.0f});
  }
};
// Whether the decode can take 4 pixels x 4 channels a thread (nhwc_decode_run_quads): as
// nhwc_quad_decodable, buckets whose 4 consecutive elements from a multiple of 4 lie in one.
PACKRAT_HD inline bool nhwc_buckets_quad_decodable(const BucketGeometry& g, const CodecWalk& w) {
  return w.channels % 4 == 0 && w.plane % 4 == 0 && g.bucket_size % 4 == 0;
}

// A decode block's first phase, thread t's share: the codes of its buckets copied into codes_copy
// (kNhwcCodeBytes, from the block's first code byte rounded down to 16) and its buckets' entries
// written into table (kNhwcBucketTable); the decoder its threads use once every thread's share is
// done (the block's barrier). b: nhwc_bucket_block with nhwc_decode_block_buckets.
PACKRAT_HD inline NhwcBucketDecoder nhwc_bucket_block_phase(const NhwcBucketSource& src, const NhwcBlock& b,
                                                            uint8_t* codes_copy, NhwcBucketEntry* table, int t,
                                                            int threads) {
  const MixedFormat& f = src.f;
  NhwcBucketDecoder d{codes_copy, table, static_cast<uint32_t>(b.first), static_cast<uint32_t>(f.g.bucket_size),
                      src.by_bucket, is_sign_magnitude(f.scale)};
  if (b.count <= 0) return d;
  const int64_t last = b.first + b.count - 1;
  const int64_t code_begin = src.offsets(b.first) / 16 * 16;
  const int64_t code_end = src.offsets(last) + bucket_code_bytes(f.g, last, src.flags(last) ? f.mix : f.base);
  copy_block_bytes(src.codes + code_begin, code_end - code_begin, codes_copy, t, threads);
  const int meta_bytes = bucket_meta_bytes(f.scale, f.meta);
  for (int64_t i = t; i < b.count; i += threads) {
    const int64_t g = b.first + i;
    const bool mix = src.flags(g);
    const uint32_t levels = mix ? f.mix.levels : f.base.levels;  // (fields, not a reference to either width:
    const int code_bits = mix ? f.mix.code_bits : f.base.code_bits;  // that put the format on the stack)
    const BucketGrid grid = load_bucket_meta(src.meta + g * meta_bytes, f.scale, f.meta, levels);
    NhwcBucketEntry e;
    e.code_at = static_cast<uint16_t>(src.offsets(g) - code_begin);
    e.hi_at = static_cast<uint16_t>(f.g.len(g));
    e.levels = static_cast<uint16_t>(levels);
    e.code_bits = static_cast<uint8_t>(code_bits);
    e.min = grid.affine.min;
    e.step = is_sign_magnitude(f.scale) ? grid.scale_over_levels : grid.affine.step;
    table[i] = e;
  }
  return d;
}

}  // namespace packrat
