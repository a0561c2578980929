#pragma once
// The per-index bodies of the mixed quantizer's CUDA kernels (quant/cuda/mixed_quant_cuda.cu) and
// their launchers: CUDA-free, so the host tests run the same bodies index by index
// (tests/quant/mixed_quant_device_test.cpp). The per-element helpers they use:
// quant/mixed/mixed_quant_device.h.
#include "quant/mixed/mixed_quant_device.h"

namespace packrat {

// Which width each bucket took: per-bucket flags (one byte per bucket, or packed one bit per
// bucket as held in MixedPacked::flags), or none when every bucket took the same width.
struct BucketFlags {
  const uint8_t* data = nullptr;  // (buckets,) u8 0/1, or (packed_bytes(buckets, 1),) packed; null: uniform
  bool packed = false;
  bool all_mix = false;           // uniform: every bucket took the mix width
  PACKRAT_HD bool operator()(int64_t g) const {
    if (!data) return all_mix;
    return packed ? packed_code_at(data, g, 1) != 0 : data[g] != 0;
  }
};

// Where each bucket's codes start: the exclusive prefix sum of the bucket code bytes, or when
// every bucket took one width, g times a full bucket's bytes (only the last bucket is short).
struct BucketOffsets {
  const int64_t* offsets = nullptr;  // (buckets + 1,), or null: uniform
  int64_t full_bytes = 0;            // uniform: packed_bytes(bucket_size, code bits)
  PACKRAT_HD int64_t operator()(int64_t g) const { return offsets ? offsets[g] : g * full_bytes; }
};

// What a quantized tensor's buffers hold, for the kernels.
struct MixedFormat {
  BucketGeometry g;
  BucketWidth base, mix;
  ScaleRule scale = ScaleRule::Affine;
  MetaType meta = MetaType::BF16;
};

// Index g < buckets: bucket g's width decision (flags[g]) and code bytes (bytes[g]); index
// buckets: bytes[buckets] = 0, so that an exclusive scan of bytes gives (buckets + 1) offsets,
// the last one the total.
struct DecideBucketsBody {
  MixedQuantConfig c;
  BucketGeometry g;
  QuantNoise noise;  // the tensor's quantization stream
  uint8_t* flags;    // (buckets,)
  int64_t* bytes;    // (buckets + 1,)

  PACKRAT_HD void operator()(int64_t i) const {
    if (i == g.buckets) {
      bytes[i] = 0;
      return;
    }
    const bool mix = bucket_takes_mix(c, noise.seed, noise.stream, static_cast<uint64_t>(i));
    flags[i] = mix ? 1 : 0;
    bytes[i] = bucket_code_bytes(g, i, mix ? c.mix : c.base);
  }
};

// The same bytes from the widths held (dequantization of a mixed tensor).
struct BucketBytesBody {
  MixedFormat f;
  BucketFlags flags;
  int64_t* bytes;  // (buckets + 1,)

  PACKRAT_HD void operator()(int64_t i) const {
    bytes[i] = i == f.g.buckets ? 0 : bucket_code_bytes(f.g, i, flags(i) ? f.mix : f.base);
  }
};

// Index j: byte j of the packed flags (bit k: bucket 8 j + k), quant/bits/bitpack.h's 1-bit layout.
struct PackFlagsBody {
  const uint8_t* flags;  // (buckets,) 0/1
  int64_t buckets;
  uint8_t* packed;       // (packed_bytes(buckets, 1),)

  PACKRAT_HD void operator()(int64_t j) const {
    uint32_t v = 0;
    for (int k = 0; k < 8 && 8 * j + k < buckets; ++k) v |= static_cast<uint32_t>(flags[8 * j + k] != 0) << k;
    packed[j] = static_cast<uint8_t>(v);
  }
};

// Index g: bucket g's grid from its values (the reference scans) and its metadata record. The
// CUDA kernel computes the same range and scale with warp reductions instead.
struct BucketMetaBody {
  const float* x;  // (numel,)
  MixedFormat f;
  BucketFlags flags;
  uint8_t* meta;   // (buckets * bucket_meta_bytes,)

  PACKRAT_HD void operator()(int64_t g) const {
    const BucketWidth& w = flags(g) ? f.mix : f.base;
    const BucketGrid grid = bucket_grid_ref(x + f.g.start(g), f.g.len(g), w, f.scale, f.meta);
    store_bucket_meta(grid, f.scale, f.meta, meta + g * bucket_meta_bytes(f.scale, f.meta));
  }
};

// Index i: block i % blocks_per_bucket() of bucket i / blocks_per_bucket(), from the bucket's
// metadata already written (the fused CUDA kernel holds the same grid in registers: loading a
// stored record gives it back exactly); blocks past a short bucket's end do nothing.
struct QuantizeBucketBlockBody {
  const float* x;  // (numel,)
  MixedFormat f;
  Rounding rounding;
  QuantNoise noise;  // the tensor's quantization stream
  BucketFlags flags;
  BucketOffsets offsets;
  const uint8_t* meta;  // (buckets * bucket_meta_bytes,)
  uint8_t* codes;       // (code bytes,)

  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t g = i / f.g.blocks_per_bucket(), block = i % f.g.blocks_per_bucket();
    const int64_t len = f.g.len(g);
    if (8 * block >= len) return;
    const BucketWidth& w = flags(g) ? f.mix : f.base;
    const BucketGrid grid = load_bucket_meta(meta + g * bucket_meta_bytes(f.scale, f.meta), f.scale, f.meta, w.levels);
    quantize_bucket_block8(x + f.g.start(g), len, block, w, f.scale, rounding,
                           QuantNoise{noise.seed, bucket_stream(noise.stream, static_cast<uint64_t>(g))}, grid,
                           codes + offsets(g));
  }
};

// Lane `sub` of the `lanes` on bucket g (dequantize_lanes(bucket size) of them): its quads of 4
// values sub, sub + lanes, ..., dequantize_bucket_block8's values, handed to the sink (StoreValues,
// or an activation's backward: quant/codec/apply_derivative_sink.h's ApplyDerivative), so that
// consecutive lanes write consecutive 16 bytes (one float4 where aligned) and read their codes 2
// to 5 bytes at once, as group_quant_warp.h's DequantizeQuadsBody does for per-group codes. (One
// thread per block of 8 wrote 8 floats at a 32-byte stride between lanes and read its codes byte
// by byte: 0.2 of copy bandwidth on an H100.)
template <class Sink = StoreValues>
struct DequantizeBucketQuadsBody {
  const uint8_t* codes;  // (code bytes,)
  const uint8_t* meta;   // (buckets * bucket_meta_bytes,)
  MixedFormat f;
  BucketFlags flags;
  BucketOffsets offsets;
  Sink sink;  // takes (values, n, first element's index)

  PACKRAT_HD void operator()(int64_t g, int sub, int lanes) const {
    const int64_t len = f.g.len(g);
    const BucketWidth w = flags(g) ? f.mix : f.base;  // a copy: a reference put the body on the stack
    const BucketGrid grid = load_bucket_meta(meta + g * bucket_meta_bytes(f.scale, f.meta), f.scale, f.meta, w.levels);
    // Codes over 8 bits keep their low bytes first (len of them), then their high bits.
    const int lo_bits = w.code_bits < 8 ? w.code_bits : 8, hi_bits = w.code_bits - lo_bits;
    const uint32_t lo_mask = (1u << lo_bits) - 1u, hi_mask = (1u << hi_bits) - 1u;
    const uint8_t* src = codes + offsets(g);
    const int64_t start = f.g.start(g);
    for (int64_t q = sub; 4 * q < len; q += lanes) {
      const int n = len - 4 * q < 4 ? static_cast<int>(len - 4 * q) : 4;
      const uint32_t lo = load_quad_codes(src, len, q, lo_bits);
      const uint32_t hi = hi_bits ? load_quad_codes(src + len, len, q, hi_bits) : 0;
      float v[4];
      for (int k = 0; k < 4; ++k) {  // past n: unused
        const uint32_t code = ((lo >> (k * lo_bits)) & lo_mask) | (((hi >> (k * hi_bits)) & hi_mask) << 8);
        v[k] = is_sign_magnitude(f.scale) ? dequantize_sign_magnitude(code, grid.scale_over_levels, w.levels)
                                          : dequantize_value(code, grid.affine);
      }
      sink(v, n, start + 4 * q);
    }
  }
};

}  // namespace packrat
