#pragma once
// Mixed-precision per-bucket quantization (the stochastic mixed-precision thesis, ch. 4 and 5).
// A saved f32 buffer (as it lies in memory) is cut into buckets of `bucket_size` contiguous
// elements, the last one a tail; each bucket independently takes the higher width `mix` with
// probability `mix_prob` and the base width otherwise (or one draw for the whole tensor, the
// thesis's global variant; with bucket_size >= numel and the max-abs rule that is exactly its
// GlobalStochActQuant, listing 5.5), and is quantized on its own scale:
//
//   affine (eq. 5.3.1, 2^b levels):  step = (max - min) / (2^b - 1),  code = round(u), u = (x - min) / step
//                                     x' = min + code * step              codes 0 .. 2^b - 1, b bits
//   sign-magnitude (listing 5.1, L levels): s = max|x| or ||x||_2 of the bucket,
//                                     m = round(|x| / s * L),  code = L + sign(x) m
//                                     x' = (code - L) * s / L            codes 0 .. 2L, ceil(log2(2L+1)) bits
//
// with round = unbiased stochastic rounding (floor + Bernoulli(frac)) or, for the deterministic
// baseline, round-to-nearest. The thesis maps b bits to L = 2^b levels for the sign-magnitude
// rule, whose 2L + 1 codes then really take b + 2 bits each (2 bits: 9 codes, 4 bits): that is
// what is held and reported. Levels can also be given directly, e.g. L = 1 (ternary, 2 bits).
//
// The affine rule keeps the bucket minimum as its (real-valued) zero point, as per-group
// quantization does (quant/group_quant.h, whose metadata rounding, per-element quantizer,
// packing and Philox noise this file reuses): the thesis's integer zero point z = round(-min/s)
// shifts the grid by up to half a step and clips the bucket's extremes, which biases them.
//
// Buffer format of one quantized tensor (all in packrat Tensors, see MixedPacked):
//   codes: bucket after bucket, each starting on a byte boundary and packed at its code bits
//          (quant/bitpack.h's layout). Widths above 8 bits: the bucket's low bytes (len bytes),
//          then its high (bits - 8)-bit parts packed: packed_bytes(len, bits) bytes in all.
//   meta:  per bucket, affine {min, step} (2 bf16 or 2 f32), sign-magnitude {s} (1 bf16 or f32).
//   flags: one bit per bucket (1 = mix width), packed, held only when a tensor's buckets do not
//          all take the same width; a uniform choice (per-tensor decision) is one host-side bit.
// The bucket code offsets are recomputed from the flags when loading: nothing else is stored.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "quant/group_quant.h"

namespace packrat {

enum class ScaleRule : uint8_t { Affine, MaxAbs, L2 };
enum class MixDecision : uint8_t { PerBucket, PerTensor };
std::string_view scale_rule_name(ScaleRule s);
std::string_view mix_decision_name(MixDecision d);
PACKRAT_HD constexpr bool is_sign_magnitude(ScaleRule s) { return s != ScaleRule::Affine; }

// Largest code width the packer here handles.
constexpr int kMaxCodeBits = 16;

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
  bool operator==(const BucketWidth&) const = default;
};
// b bits of the affine rule: codes 0 .. 2^b - 1. b in [1, 16].
BucketWidth affine_width(int bits);
// L levels of the sign-magnitude rule (codes 0 .. 2L); its nominal label is ceil(log2 L).
BucketWidth sign_magnitude_width(uint32_t levels);
// The width for nominal `bits` under a scale rule (sign-magnitude: L = 2^bits).
BucketWidth width_for_bits(ScaleRule s, int bits);

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
  int64_t start(int64_t g) const { return g * bucket_size; }
  int64_t len(int64_t g) const { return g == buckets - 1 ? tail_len : bucket_size; }
};
BucketGeometry bucket_geometry(int64_t numel, int64_t bucket_size);

// One quantized tensor. The Tensors are allocated under the caller's TagScope.
struct MixedPacked {
  int64_t numel = 0;
  int64_t bucket_size = 1;
  BucketWidth base, mix;
  ScaleRule scale = ScaleRule::Affine;
  MetaType meta = MetaType::BF16;
  int64_t mix_buckets = 0;      // buckets that took the mix width
  bool uniform = true;          // every bucket took the same width (no flags held)
  bool uniform_is_mix = false;  // that width, when uniform
  Tensor codes;                 // (code bytes,) u8
  Tensor meta_data;             // (buckets * bucket_meta_bytes,) u8
  Tensor flags;                 // (packed_bytes(buckets, 1),) u8, or undefined when uniform

  BucketGeometry geometry() const { return bucket_geometry(numel, bucket_size); }
  // Bytes held, as the allocator counts them.
  int64_t bytes() const;
  // Bits per element of the codes alone, and of everything held.
  double code_bits_per_element() const;
  double bits_per_element() const { return numel ? 8.0 * static_cast<double>(bytes()) / static_cast<double>(numel) : 0.0; }
};

// The bytes one quantized tensor holds when its buckets took the widths in `flags` (buckets,)
// u8 0/1: codes, metadata, and the packed flags unless all are equal. The formula the
// allocator's count must equal.
int64_t mixed_bytes_formula(const BucketGeometry& g, const MixedQuantConfig& c, const std::vector<uint8_t>& flags);

// ---- randomness ---------------------------------------------------------------------------
// Each bucket is quantized as per-group quantization quantizes one group, on its own Philox
// stream: element i of bucket b draws rounding_noise16(seed, bucket_stream(stream, b), i)
// (quant/group_quant.h), stream = quant_stream(step, tensor). The noise is still a pure function
// of (seed, step, tensor, element). The bucket decisions draw from a stream of their own.
PACKRAT_HD constexpr uint64_t bucket_stream(uint64_t quant_stream_id, uint64_t bucket) {
  uint64_t z = bucket + 0x9E3779B97F4A7C15ull;  // splitmix64 of the bucket index
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return quant_stream_id ^ z ^ (z >> 31);
}
PACKRAT_HD constexpr uint64_t mix_decision_stream(uint64_t quant_stream_id) { return quant_stream_id ^ (uint64_t{1} << 63); }
// The decision uniform of bucket g (24 bits, in [0, 1)): word g mod 4 of Philox(seed, stream, g / 4).
PACKRAT_HD inline float mix_decision_uniform(uint64_t seed, uint64_t stream, uint64_t g) {
  uint32_t w[4];
  Philox4x32::generate(seed, stream, g >> 2, w);
  return Philox4x32::to_uniform(w[g & 3]);
}

// The rounding noise of whole 128-element blocks (rounding_noise16's layout: 16 Philox counters
// per block, one per SIMD lane), computed 16 lanes at a time and kept while the next elements
// fall in the same block. For the widths and rules per-group quantization does not cover.
class RoundingNoise {
 public:
  explicit RoundingNoise(const QuantNoise& noise) : noise_(noise) {}
  // out[i] = rounding_noise16(seed, stream, e0 + i), i < n.
  void fill(int64_t e0, int64_t n, uint16_t* out);

 private:
  QuantNoise noise_;
  int64_t block_ = -1;
  alignas(64) uint16_t values_[128];  // (128,) the noise of block_
};
void fill_rounding_noise(const QuantNoise& noise, int64_t e0, int64_t n, uint16_t* out);

// flags[g] = 1 where bucket g takes the mix width (g < buckets): per bucket, u_g < mix_prob;
// per tensor, one draw u_0 < mix_prob for all. `noise.stream` is the quantization stream.
void decide_buckets(const BucketGeometry& g, const MixedQuantConfig& c, const QuantNoise& noise, uint8_t* flags);

// ---- per-element helpers (host and device) ------------------------------------------------

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

// Packs n codes of `bits` (1..16) bits, starting on a byte boundary, in this file's layout
// (bits <= 8: quant/bitpack.h's; wider: n low bytes, then the high bits - 8 bits packed), which
// takes packed_bytes(n, bits) bytes; e.g. the Index requests of the store.
void pack_wide_codes(const uint16_t* codes, int64_t n, int bits, uint8_t* dst);
void unpack_wide_codes(const uint8_t* src, int64_t n, int bits, uint16_t* codes);

// The sign-magnitude scale of a bucket, before rounding to the metadata: max|x|, or for the L2
// rule max(||x||_2, max|x|) (equal in exact arithmetic; the max absorbs f32 rounding of the
// norm). The sum of squares has one canonical order, which every kernel keeps so the scale is
// bit-identical across devices: when n >= 16, 16 lane sums (lane l: a fused multiply-add of each
// x[i], i = l mod 16, i < 16 * floor(n / 16), in order), added lane 0 to 15; then the remaining
// elements in order, one fused multiply-add each.
PACKRAT_HD inline float bucket_scale_ref(const float* x, int64_t n, ScaleRule rule) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    amax = amax < a ? a : amax;
  }
  if (rule != ScaleRule::L2) return amax;
  float sumsq = 0.0f;
  const int64_t lanes_end = n >= 16 ? n / 16 * 16 : 0;
  if (lanes_end) {
    float lane[16] = {};
    for (int64_t i0 = 0; i0 < lanes_end; i0 += 16)
      for (int l = 0; l < 16; ++l) lane[l] = std::fma(x[i0 + l], x[i0 + l], lane[l]);
    for (int l = 0; l < 16; ++l) sumsq += lane[l];
  }
  for (int64_t i = lanes_end; i < n; ++i) sumsq = std::fma(x[i], x[i], sumsq);
  const float norm = std::sqrt(sumsq);
  return norm < amax ? amax : norm;
}

// Whether bucket g takes the mix width: a per-bucket draw u_g < mix_prob, or for a per-tensor
// decision u_0 < mix_prob for all; never when both widths are equal. `stream` is the tensor's
// quantization stream.
PACKRAT_HD inline bool bucket_takes_mix(const MixedQuantConfig& c, uint64_t seed, uint64_t stream, uint64_t g) {
  if (c.base == c.mix) return false;
  const uint64_t k = c.decision == MixDecision::PerTensor ? 0 : g;
  return mix_decision_uniform(seed, mix_decision_stream(stream), k) < static_cast<float>(c.mix_prob);
}

// ---- one bucket, element by element: the reference of every kernel -------------------------

// Quantizes one bucket x[0..len), len >= 1, at width w: its metadata record at meta_dst
// (bucket_meta_bytes) and packed_bytes(len, w.code_bits) code bytes at dst in this file's
// layout, 8 codes (one block) at a time. `noise` is the bucket's own stream (bucket_stream):
// element i draws rounding_uniform(seed, stream, i).
PACKRAT_HD inline void quantize_bucket_ref(const float* x, int64_t len, const BucketWidth& w, ScaleRule scale,
                                           Rounding rounding, MetaType meta, const QuantNoise& noise,
                                           uint8_t* meta_dst, uint8_t* dst) {
  GroupParams p{0.0f, 0.0f, 0.0f};
  float los = 0.0f;  // sign-magnitude: L / s
  if (!is_sign_magnitude(scale)) {
    float mn = x[0], mx = x[0];
    for (int64_t i = 1; i < len; ++i) {
      mn = x[i] < mn ? x[i] : mn;
      mx = x[i] > mx ? x[i] : mx;
    }
    p = group_params(mn, mx, w.bits, meta);
    store_group_meta(p, meta, meta_dst);
  } else {
    const float s = sign_magnitude_scale(bucket_scale_ref(x, len, scale), meta);
    if (meta == MetaType::BF16) {
      const uint16_t h = f32_to_bf16_up(s);  // exact: s is already a bf16 value
      std::memcpy(meta_dst, &h, 2);
    } else {
      std::memcpy(meta_dst, &s, 4);
    }
    los = safe_inverse(s) * static_cast<float>(w.levels);
  }
  const int lo_bits = w.code_bits < 8 ? w.code_bits : 8, hi_bits = w.code_bits - lo_bits;
  for (int64_t b = 0; b < len; b += 8) {
    const int n = len - b < 8 ? static_cast<int>(len - b) : 8;
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < n; ++k) {
      const float r = rounding == Rounding::Stochastic ? rounding_uniform(noise.seed, noise.stream, b + k) : 0.5f;
      const uint32_t code = is_sign_magnitude(scale) ? quantize_sign_magnitude(x[b + k], los, w.levels, r)
                                                     : quantize_value(x[b + k], p, w.levels, r);
      lo |= block_put(code & 0xFFu, k, lo_bits);
      if (hi_bits) hi |= block_put(code >> 8, k, hi_bits);
    }
    store_block8(lo, static_cast<int>(packed_bytes(n, lo_bits)), dst + (b / 8) * lo_bits);
    if (hi_bits) store_block8(hi, static_cast<int>(packed_bytes(n, hi_bits)), dst + len + (b / 8) * hi_bits);
  }
}

// Dequantizes one bucket written by quantize_bucket_ref: out[0..len).
PACKRAT_HD inline void dequantize_bucket_ref(const uint8_t* src, int64_t len, const BucketWidth& w, ScaleRule scale,
                                             MetaType meta, const uint8_t* meta_src, float* out) {
  const int lo_bits = w.code_bits < 8 ? w.code_bits : 8, hi_bits = w.code_bits - lo_bits;
  GroupParams p{0.0f, 0.0f, 0.0f};
  float sol = 0.0f;  // sign-magnitude: s / L
  if (!is_sign_magnitude(scale)) {
    p = load_group_meta(meta_src, meta);
  } else {
    float s;
    if (meta == MetaType::BF16) {
      uint16_t h;
      std::memcpy(&h, meta_src, 2);
      s = bf16_to_f32(h);
    } else {
      std::memcpy(&s, meta_src, 4);
    }
    sol = s / static_cast<float>(w.levels);
  }
  for (int64_t i = 0; i < len; ++i) {
    uint32_t code = packed_code_at(src, i, lo_bits);
    if (hi_bits) code |= packed_code_at(src + len, i, hi_bits) << 8;
    out[i] = is_sign_magnitude(scale) ? dequantize_sign_magnitude(code, sol, w.levels) : dequantize_value(code, p);
  }
}

// ---- entry points: dispatched by the device of their tensors -------------------------------

// Quantizes x (any shape, f32, the buffer as it lies); the result's Tensors on x's device under
// the current TagScope. CPU: the kernel below. Another device: packrat::Error (no CUDA kernels
// yet, issue 11).
MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise);
// Dequantizes into out (p.numel f32, any shape) on the codes' device.
void dequantize_mixed(const MixedPacked& p, const Tensor& out);

// ---- the CPU kernels (mixed_quant_cpu.cpp), on host pointers ------------------------------

// Quantizes x (numel floats, the buffer as it lies) in one parallel pass over the buckets (the
// bytes of quantize_bucket_ref, bucket by bucket, with the widths of bucket_takes_mix).
// The widths are chosen by decide_buckets with the same noise; Tensors under the current TagScope.
// Affine buckets at 1, 2, 3, 4 or 8 bits are quantized by a fused kernel built from per-group
// quantization's SIMD pieces (quant/group_quant_simd.h: noise, range, packing) and dequantized by
// dequantize_groups; the other widths and the sign-magnitude rules by this file's own loops.
MixedPacked quantize_mixed(const float* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise);
// Dequantizes into out (p.numel floats).
void dequantize_mixed(const MixedPacked& p, float* out);

}  // namespace packrat
