#pragma once
// Mixed-precision bucket quantization, the part every device runs (quant/mixed/mixed_quant.h has the
// format and the entry points): the per-element and per-bucket helpers, the one-bucket reference
// (quantize_bucket_ref / dequantize_bucket_ref); the per-index bodies of the CUDA kernels build on
// them (quant/mixed/mixed_kernel_bodies.h). CUDA-free and fmt-free: g++ compiles it for the CPU kernels
// (quant/cpu/mixed_quant_cpu.cpp, which share the helpers) and for the tests that run the bodies on
// the host (tests/quant/mixed_quant_device_test.cpp), nvcc for the kernels, so a code written on
// one device decodes bit-identically on the other.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/activation_id.h"
#include "core/noise_hash.h"               // splitmix64
#include "core/philox.h"                   // the bucket decisions' draws
#include "quant/bits/block_io.h"           // load_quad_codes, store_floats4
#include "quant/bits/wide_codes.h"         // kMaxWideCodeBits
#include "quant/group/group_quant.h"       // GroupParams, the metadata rounding, quantize_value, the rounding noise
#include "quant/group/group_quant_warp.h"  // dequantize_lanes

namespace packrat {

enum class ScaleRule : uint8_t { Affine, MaxAbs, L2 };
enum class MixDecision : uint8_t { PerBucket, PerTensor };
PACKRAT_HD constexpr bool is_sign_magnitude(ScaleRule s) { return s != ScaleRule::Affine; }

// Largest code width the packer here handles.
constexpr int kMaxCodeBits = kMaxWideCodeBits;

// Bits that 2L + 1 sign-magnitude codes need: ceil(log2(2L + 1)).
constexpr int sign_magnitude_code_bits(uint32_t levels) {
  int b = 0;
  while ((uint64_t{1} << b) < 2 * uint64_t{levels} + 1) ++b;
  return b;
}

// One precision a bucket can take.
struct BucketWidth {
  int bits = 2;         // nominal bit-width, the thesis's label (sign-magnitude: ceil(log2 L), at least 1)
  uint32_t levels = 3;  // affine: largest code 2^bits - 1; sign-magnitude: L (codes 0 .. 2L)
  int code_bits = 2;    // bits each element's code really takes
  PACKRAT_HD bool operator==(const BucketWidth& o) const {
    return bits == o.bits && levels == o.levels && code_bits == o.code_bits;
  }
};
// b bits of the affine rule: codes 0 .. 2^b - 1. b in [1, 16].
BucketWidth affine_width(int bits);

struct MixedQuantConfig {
  BucketWidth base = affine_width(2);
  BucketWidth mix = affine_width(4);
  double mix_prob = 0.5;  // P(a bucket takes `mix`), already read off any schedule
  MixDecision decision = MixDecision::PerBucket;
  int64_t bucket_size = 512;
  ScaleRule scale = ScaleRule::Affine;
  Rounding rounding = Rounding::Stochastic;
  MetaType meta = MetaType::BF16;
  // Throws naming `where` for an invalid combination (mix below base, probability outside
  // [0, 1], zero bucket, widths the rule or the packer cannot hold).
  void check(std::string_view where) const;
};

// Bytes of one bucket's metadata.
PACKRAT_HD constexpr int bucket_meta_bytes(ScaleRule s, MetaType m) {
  return (is_sign_magnitude(s) ? 1 : 2) * (m == MetaType::BF16 ? 2 : 4);
}

// Buckets of a flat buffer: `buckets` of bucket_size elements, the last one tail_len (1..size).
struct BucketGeometry {
  int64_t numel = 0, bucket_size = 1, buckets = 0, tail_len = 0;
  PACKRAT_HD int64_t start(int64_t g) const { return g * bucket_size; }
  PACKRAT_HD int64_t len(int64_t g) const { return g == buckets - 1 ? tail_len : bucket_size; }
  // Blocks of 8 elements (one packed block) in a full bucket.
  PACKRAT_HD int64_t blocks_per_bucket() const { return (bucket_size + 7) / 8; }
};

// Code bytes of bucket g at width w (its codes start on a byte boundary).
PACKRAT_HD inline int64_t bucket_code_bytes(const BucketGeometry& g, int64_t bucket, const BucketWidth& w) {
  return packed_bytes(g.len(bucket), w.code_bits);
}

// ---- randomness ---------------------------------------------------------------------------
// Each bucket is quantized as per-group quantization quantizes one group, on its own noise
// stream: element i of bucket b draws rounding_noise16(seed, bucket_stream(stream, b), i)
// (quant/group/group_quant.h), stream = quant_stream(step, tensor). The noise is still a pure function
// of (seed, step, tensor, element). The bucket decisions draw from a stream of their own.
PACKRAT_HD constexpr uint64_t bucket_stream(uint64_t quant_stream_id, uint64_t bucket) {
  return quant_stream_id ^ splitmix64(bucket);
}
PACKRAT_HD constexpr uint64_t mix_decision_stream(uint64_t quant_stream_id) { return quant_stream_id ^ (uint64_t{1} << 63); }
// The decision uniform of bucket g (24 bits, in [0, 1)): word g mod 4 of Philox(seed, stream, g / 4).
PACKRAT_HD inline float mix_decision_uniform(uint64_t seed, uint64_t stream, uint64_t g) {
  uint32_t w[4];
  Philox4x32::generate(seed, stream, g >> 2, w);
  return Philox4x32::to_uniform(w[g & 3]);
}

// Whether bucket g takes the mix width: a per-bucket draw u_g < mix_prob, or for a per-tensor
// decision u_0 < mix_prob for all; never when both widths are equal. `stream` is the tensor's
// quantization stream.
PACKRAT_HD inline bool bucket_takes_mix(const MixedQuantConfig& c, uint64_t seed, uint64_t stream, uint64_t g) {
  if (c.base == c.mix) return false;
  const uint64_t k = c.decision == MixDecision::PerTensor ? 0 : g;
  return mix_decision_uniform(seed, mix_decision_stream(stream), k) < static_cast<float>(c.mix_prob);
}

// ---- per-element helpers ------------------------------------------------------------------

// Sign-magnitude code of x with r uniform in (0, 1) (0.5: round to nearest, ties down);
// levels_over_scale = L / s (0 for an all-zero bucket: every code is L, the value 0).
PACKRAT_HD inline uint32_t quantize_sign_magnitude(float x, float levels_over_scale, uint32_t levels, float r) {
  // |x| <= s always; the min only absorbs f32 rounding (and sends NaN to L). Written with plain
  // comparisons and casts (no fmin/trunc calls) so loops over it vectorise.
  const float fl_levels = static_cast<float>(levels);
  float u = std::fabs(x) * levels_over_scale;
  u = u < fl_levels ? u : fl_levels;
  const int32_t fl = static_cast<int32_t>(u);
  const int32_t m = fl + (r < u - static_cast<float>(fl) ? 1 : 0);
  return static_cast<uint32_t>(static_cast<int32_t>(levels) + (x < 0.0f ? -m : m));
}
PACKRAT_HD inline float dequantize_sign_magnitude(uint32_t code, float scale_over_levels, uint32_t levels) {
  return static_cast<float>(static_cast<int32_t>(code) - static_cast<int32_t>(levels)) * scale_over_levels;
}
// A bucket's stored sign-magnitude scale: s rounded up to the metadata precision, so |x| <= s.
PACKRAT_HD inline float sign_magnitude_scale(float s, MetaType meta) {
  return meta == MetaType::BF16 ? bf16_to_f32(f32_to_bf16_up(s)) : s;
}

// ---- one bucket's grid and metadata ---------------------------------------------------------

// The grid a bucket's codes are drawn on, from its stored metadata (so that a record loaded back
// gives exactly the grid the codes were written with).
struct BucketGrid {
  GroupParams affine{0.0f, 0.0f, 0.0f};  // affine: min, step, 1/step
  float scale = 0.0f;                    // sign-magnitude: the stored s
  float levels_over_scale = 0.0f;        // L / s (0 when s is 0), to quantize
  float scale_over_levels = 0.0f;        // s / L, to dequantize
};
PACKRAT_HD inline BucketGrid affine_grid(const GroupParams& p) {
  BucketGrid g;
  g.affine = p;
  return g;
}
// s: the stored scale (sign_magnitude_scale of the bucket's max|x| or L2 norm).
PACKRAT_HD inline BucketGrid sign_magnitude_grid(float s, uint32_t levels) {
  BucketGrid g;
  g.scale = s;
  g.levels_over_scale = safe_inverse(s) * static_cast<float>(levels);
  g.scale_over_levels = s / static_cast<float>(levels);
  return g;
}

// Writes / reads a bucket's metadata record (bucket_meta_bytes): affine {min, step}, as per-group
// quantization's; sign-magnitude {s}, bf16 (exact: s is already a bf16 value) or f32.
PACKRAT_HD inline void store_bucket_meta(const BucketGrid& g, ScaleRule scale, MetaType meta, uint8_t* dst) {
  if (!is_sign_magnitude(scale)) {
    store_group_meta(g.affine, meta, dst);
  } else if (meta == MetaType::BF16) {
    const uint16_t h = f32_to_bf16_up(g.scale);
    std::memcpy(dst, &h, 2);
  } else {
    std::memcpy(dst, &g.scale, 4);
  }
}
PACKRAT_HD inline BucketGrid load_bucket_meta(const uint8_t* src, ScaleRule scale, MetaType meta, uint32_t levels) {
  if (!is_sign_magnitude(scale)) return affine_grid(load_group_meta(src, meta));
  float s;
  if (meta == MetaType::BF16) {
    uint16_t h;
    std::memcpy(&h, src, 2);
    s = bf16_to_f32(h);
  } else {
    std::memcpy(&s, src, 4);
  }
  return sign_magnitude_grid(s, levels);
}

// ---- a bucket's range and scale, in their canonical order ----------------------------------

// min and max of x[0..n), n >= 1, a plain scan (the CPU's order; the GPU's warp reduction keeps
// its result, quant/cuda/warp_range.cuh).
PACKRAT_HD inline void bucket_range_ref(const float* x, int64_t n, float& mn_out, float& mx_out) {
  float mn = x[0], mx = x[0];
  for (int64_t i = 1; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  mn_out = mn;
  mx_out = mx;
}

// The larger of a running max|x| and a, NaN ignored (any order gives the same value).
PACKRAT_HD inline float max_abs_step(float amax, float a) { return amax < a ? a : amax; }

// The L2 rule's sum of squares has one canonical order, which every kernel keeps so the scale
// is bit-identical across devices: when n >= 16, 16 lane sums (lane l: a fused multiply-add of
// each x[i], i = l mod 16, i < l2_lanes_end(n), in order), added lane 0 to 15; then the
// remaining elements in order, one fused multiply-add each.
PACKRAT_HD inline int64_t l2_lanes_end(int64_t n) { return n >= 16 ? n / 16 * 16 : 0; }
PACKRAT_HD inline float l2_lane_sum(const float* x, int64_t lanes_end, int lane) {
  float s = 0.0f;
  for (int64_t i = lane; i < lanes_end; i += 16) s = std::fma(x[i], x[i], s);
  return s;
}
// The scale from the lanes' total (lane 0 + ... + lane 15, in that order) and max|x|: the
// remaining elements, then max(||x||_2, max|x|) (equal in exact arithmetic; the max absorbs
// f32 rounding of the norm).
PACKRAT_HD inline float l2_scale_finish(float lanes_total, const float* x, int64_t n, float amax) {
  float sumsq = lanes_total;
  for (int64_t i = l2_lanes_end(n); i < n; ++i) sumsq = std::fma(x[i], x[i], sumsq);
  const float norm = std::sqrt(sumsq);
  return norm < amax ? amax : norm;
}

// The sign-magnitude scale of a bucket, before rounding to the metadata: max|x|, or for the L2
// rule max(||x||_2, max|x|) in the canonical order above.
PACKRAT_HD inline float bucket_scale_ref(const float* x, int64_t n, ScaleRule rule) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = max_abs_step(amax, std::fabs(x[i]));
  if (rule != ScaleRule::L2) return amax;
  const int64_t lanes_end = l2_lanes_end(n);
  float total = 0.0f;
  for (int l = 0; l < 16 && lanes_end; ++l) total += l2_lane_sum(x, lanes_end, l);
  return l2_scale_finish(total, x, n, amax);
}

// A bucket's grid from its values (the reference scans).
PACKRAT_HD inline BucketGrid bucket_grid_ref(const float* x, int64_t len, const BucketWidth& w, ScaleRule scale,
                                             MetaType meta) {
  if (!is_sign_magnitude(scale)) {
    float mn, mx;
    bucket_range_ref(x, len, mn, mx);
    return affine_grid(group_params(mn, mx, w.bits, meta));
  }
  return sign_magnitude_grid(sign_magnitude_scale(bucket_scale_ref(x, len, scale), meta), w.levels);
}

// ---- one block of 8 elements of a bucket: what a GPU thread does -----------------------------
// A bucket's codes in this file's layout: widths up to 8 bits packed (quant/bits/bitpack.h's layout);
// wider codes as the bucket's low bytes (len bytes), then its high (bits - 8)-bit parts packed.

// Quantizes block `block` of a bucket of len values, its n = block8_len(len, block) values
// v, into the bucket's codes at dst, value k rounded with the uniform r[k] (0.5: to nearest).
// The block must exist (n > 0).
PACKRAT_HD inline void quantize_bucket_block8_with(const float* v, int n, int64_t len, int64_t block,
                                                   const BucketWidth& w, ScaleRule scale, const float* r,
                                                   const BucketGrid& grid, uint8_t* dst) {
  const int lo_bits = w.code_bits < 8 ? w.code_bits : 8, hi_bits = w.code_bits - lo_bits;
  uint64_t lo = 0, hi = 0;
  for (int k = 0; k < 8; ++k) {  // a constant trip count: a GPU keeps v and r in registers
    if (k >= n) break;
    const uint32_t code = is_sign_magnitude(scale) ? quantize_sign_magnitude(v[k], grid.levels_over_scale, w.levels, r[k])
                                                   : quantize_value(v[k], grid.affine, w.levels, r[k]);
    lo |= block_put(code & 0xFFu, k, lo_bits);
    if (hi_bits) hi |= block_put(code >> 8, k, hi_bits);
  }
  store_block8(lo, static_cast<int>(packed_bytes(n, lo_bits)), dst + block * lo_bits);
  if (hi_bits) store_block8(hi, static_cast<int>(packed_bytes(n, hi_bits)), dst + len + block * hi_bits);
}

// The same with the bucket's own noise stream (bucket_stream): element i draws
// rounding_uniform(seed, stream, i).
PACKRAT_HD inline void quantize_bucket_block8(const float* x, int64_t len, int64_t block, const BucketWidth& w,
                                              ScaleRule scale, Rounding rounding, const QuantNoise& noise,
                                              const BucketGrid& grid, uint8_t* dst) {
  float r[8];
  const int n = block8_len(len, block);
  for (int k = 0; k < n; ++k)
    r[k] = rounding == Rounding::Stochastic ? rounding_uniform(noise.seed, noise.stream, static_cast<uint64_t>(8 * block + k))
                                            : 0.5f;
  quantize_bucket_block8_with(x + 8 * block, n, len, block, w, scale, r, grid, dst);
}

// Dequantizes the same block of a bucket written by quantize_bucket_block8: out[8 * block ..]
// (clipped to len), out the bucket's first value.
PACKRAT_HD inline void dequantize_bucket_block8(const uint8_t* src, int64_t len, int64_t block, const BucketWidth& w,
                                                ScaleRule scale, const BucketGrid& grid, float* out) {
  const int lo_bits = w.code_bits < 8 ? w.code_bits : 8, hi_bits = w.code_bits - lo_bits;
  const int64_t b = 8 * block;
  const int n = block8_len(len, block);
  const uint64_t lo = load_block8(src + block * lo_bits, lo_bits, static_cast<int>(packed_bytes(n, lo_bits)));
  const uint64_t hi = hi_bits ? load_block8(src + len + block * hi_bits, hi_bits, static_cast<int>(packed_bytes(n, hi_bits))) : 0;
  for (int k = 0; k < n; ++k) {
    uint32_t code = block_code(lo, k, lo_bits);
    if (hi_bits) code |= block_code(hi, k, hi_bits) << 8;
    out[b + k] = is_sign_magnitude(scale) ? dequantize_sign_magnitude(code, grid.scale_over_levels, w.levels)
                                          : dequantize_value(code, grid.affine);
  }
}

// ---- one bucket, element by element: the reference of every kernel -------------------------

// Quantizes one bucket x[0..len), len >= 1, at width w: its metadata record at meta_dst
// (bucket_meta_bytes) and packed_bytes(len, w.code_bits) code bytes at dst, one block of 8
// codes at a time. `noise` is the bucket's own stream (bucket_stream).
PACKRAT_HD inline void quantize_bucket_ref(const float* x, int64_t len, const BucketWidth& w, ScaleRule scale,
                                           Rounding rounding, MetaType meta, const QuantNoise& noise,
                                           uint8_t* meta_dst, uint8_t* dst) {
  const BucketGrid grid = bucket_grid_ref(x, len, w, scale, meta);
  store_bucket_meta(grid, scale, meta, meta_dst);
  for (int64_t block = 0; 8 * block < len; ++block)
    quantize_bucket_block8(x, len, block, w, scale, rounding, noise, grid, dst);
}

// Dequantizes one bucket written by quantize_bucket_ref: out[0..len).
PACKRAT_HD inline void dequantize_bucket_ref(const uint8_t* src, int64_t len, const BucketWidth& w, ScaleRule scale,
                                             MetaType meta, const uint8_t* meta_src, float* out) {
  const BucketGrid grid = load_bucket_meta(meta_src, scale, meta, w.levels);
  for (int64_t block = 0; 8 * block < len; ++block) dequantize_bucket_block8(src, len, block, w, scale, grid, out);
}

}  // namespace packrat
