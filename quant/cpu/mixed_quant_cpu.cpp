// The CPU kernels of mixed-precision bucket quantization: AVX-512 where the build has it (AVX2
// in the blocks shared with per-group quantization), OpenMP over ranges of buckets. They write
// the same bytes as the per-bucket reference in quant/mixed/mixed_quant_device.h (quantize_bucket_ref /
// dequantize_bucket_ref), whose helpers they share, as tests/quant/codec_bitexact_test.cpp checks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/cpu/bf16_simd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/cpu/bucket_tiles.h"
#include "quant/cpu/code_bits.h"
#include "quant/bits/bitpack.h"
#include "quant/cpu/group_quant_simd.h"
#include "quant/mixed/mixed_quant.h"
#include "quant/cpu/plain_runs.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace packrat {

void RoundingNoise::fill(int64_t e0, int64_t n, uint16_t* out) {
  int64_t i = 0;
  while (i < n) {
    const int64_t e = e0 + i, block = e >> 7, first = e & 127;
    const int64_t take = std::min<int64_t>(n - i, 128 - first);
    if (block != block_) {
      simd::noise_block16(key_, block, values_);
      block_ = block;
    }
    std::memcpy(out + i, values_ + first, static_cast<size_t>(take) * sizeof(uint16_t));
    i += take;
  }
}

// GCC 12 warns about the undefined pass-through operand inside AVX-512 intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

void decide_buckets(const BucketGeometry& g, const MixedQuantConfig& c, const QuantNoise& noise, uint8_t* flags) {
  const uint64_t stream = mix_decision_stream(noise.stream);
  const float p = static_cast<float>(c.mix_prob);
  if (c.base == c.mix || c.decision == MixDecision::PerTensor) {  // one width for all: one draw (or none)
    std::fill(flags, flags + g.buckets, bucket_takes_mix(c, noise.seed, noise.stream, 0) ? 1 : 0);
  } else {
    int64_t b = 0;
#if defined(__AVX512F__)
    // 16 counters (64 buckets) at once: bucket 4 (c0 + lane) + k takes word k of lane.
    const __m512 vp = _mm512_set1_ps(p), scale = _mm512_set1_ps(1.0f / 16777216.0f);
    for (; b + 64 <= g.buckets; b += 64) {
      __m512i w[4];
      group_simd::philox16(noise.seed, stream, static_cast<uint64_t>(b) >> 2, w);
      uint64_t bits = 0;  // bit 4 lane + k: bucket b + 4 lane + k
      for (int k = 0; k < 4; ++k) {
        const uint64_t m = _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w[k], 8)), scale), vp, _CMP_LT_OQ);
#if defined(__BMI2__)
        bits |= _pdep_u64(m, 0x1111111111111111ull << k);
#else
        for (int l = 0; l < 16; ++l) bits |= ((m >> l) & 1) << (4 * l + k);
#endif
      }
#if defined(__AVX512BW__)
      _mm512_storeu_si512(flags + b, _mm512_maskz_set1_epi8(bits, 1));
#else
      for (int j = 0; j < 64; ++j) flags[b + j] = static_cast<uint8_t>((bits >> j) & 1);
#endif
    }
#endif
    for (; b < g.buckets; b += 4) {
      uint32_t w[4];
      Philox4x32::generate(noise.seed, stream, static_cast<uint64_t>(b) >> 2, w);
      for (int64_t k = 0; k < 4 && b + k < g.buckets; ++k) flags[b + k] = Philox4x32::to_uniform(w[k]) < p ? 1 : 0;
    }
  }
}

namespace {

constexpr int64_t kChunk = 256;  // elements quantized per inner pass (a multiple of the noise's 128-element blocks)

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 reduction intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
void bucket_min_max(const float* x, int64_t n, float& mn_out, float& mx_out) {
  float mn = x[0], mx = x[0];
  int64_t i = 0;
#if defined(__AVX512F__)
  if (n >= 16) {
    __m512 vmn = _mm512_loadu_ps(x), vmx = vmn;
    for (i = 16; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      vmn = _mm512_min_ps(vmn, v);
      vmx = _mm512_max_ps(vmx, v);
    }
    mn = _mm512_reduce_min_ps(vmn);
    mx = _mm512_reduce_max_ps(vmx);
  }
#endif
  for (; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  mn_out = mn;
  mx_out = mx;
}

// The sign-magnitude scale of a bucket: bucket_scale_ref's value and order of operations
// (16 lane sums added lane 0 to 15, then the tail), with AVX-512 where the build has it.
float bucket_scale(const float* x, int64_t n, ScaleRule rule) {
#if defined(__AVX512F__)
  if (n >= 16) {
    __m512 va = _mm512_setzero_ps(), vs = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      va = _mm512_max_ps(va, _mm512_abs_ps(v));
      vs = _mm512_fmadd_ps(v, v, vs);
    }
    alignas(64) float lane[16];  // (16,) the lane sums
    _mm512_store_ps(lane, vs);
    float amax = _mm512_reduce_max_ps(va), total = 0.0f;
    for (int l = 0; l < 16; ++l) total += lane[l];
    for (; i < n; ++i) amax = max_abs_step(amax, std::fabs(x[i]));
    return rule == ScaleRule::L2 ? l2_scale_finish(total, x, n, amax) : amax;
  }
#endif
  return bucket_scale_ref(x, n, rule);
}
#pragma GCC diagnostic pop

struct BucketJob {
  ScaleRule scale;
  Rounding rounding;
  MetaType meta;
};

// Affine buckets at the widths per-group quantization packs are its single groups.
bool per_group_kernel(ScaleRule s, const BucketWidth& w) { return s == ScaleRule::Affine && group_bits_supported(w.bits); }

GroupGeometry one_group(int64_t len, int bits, MetaType meta) {
  GroupQuantConfig gc;
  gc.bits = bits;
  gc.group_size = len;
  gc.grouping = Grouping::Flat;
  gc.meta = meta;
  return group_geometry(len, 1, gc);
}

// Writes n codes (element offset c of a bucket of len, c a multiple of 8) at the bucket's dst.
template <int CB, typename Code>
inline void put_codes(const Code* codes, int64_t n, int64_t c, int64_t len, uint8_t* dst) {
  if constexpr (CB <= 8) {
    pack_group_codes(codes, n, CB, dst + c * CB / 8);
  } else {
    alignas(64) uint8_t high[kChunk];  // (kChunk,)
    uint8_t* low = dst + c;
    for (int64_t i = 0; i < n; ++i) {
      low[i] = static_cast<uint8_t>(codes[i]);
      high[i] = static_cast<uint8_t>(codes[i] >> 8);
    }
    pack_group_codes(high, n, CB - 8, dst + len + c * (CB - 8) / 8);
  }
}

template <int CB, typename Code>
inline void get_codes(const uint8_t* src, int64_t n, int64_t c, int64_t len, Code* codes) {
  if constexpr (CB <= 8) {
    unpack_group_codes(src + c * CB / 8, n, CB, codes);
  } else {
    alignas(64) uint8_t high[kChunk];  // (kChunk,)
    unpack_group_codes(src + len + c * (CB - 8) / 8, n, CB - 8, high);
    const uint8_t* low = src + c;
    for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<Code>(low[i] | (static_cast<uint32_t>(high[i]) << 8));
  }
}

// Code widths that group_simd's register packers take (quantize_pack_with, unpack_with).
constexpr bool packs_in_registers(int cb) { return cb == 1 || cb == 2 || cb == 3 || cb == 4 || cb == 8; }

#if defined(__AVX512BW__) && defined(__BMI2__)
// quantize_sign_magnitude lane by lane, for quantize_pack_with: 16 values v, their uniforms r.
struct SignMagnitudeCodes {
  __m512 los, fl_levels;
  __m512i levels;
  SignMagnitudeCodes(float levels_over_scale, uint32_t lv)
      : los(_mm512_set1_ps(levels_over_scale)),
        fl_levels(_mm512_set1_ps(static_cast<float>(lv))),
        levels(_mm512_set1_epi32(static_cast<int>(lv))) {}
  __m512i operator()(__m512 v, __m512 r) const {
    // u = min(|x| los, L): MINPS's second operand, L, where u is NaN, as the reference's u < L ? u : L
    const __m512 u = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(v), los), fl_levels);
    const __m512i fl = _mm512_cvttps_epi32(u);
    const __m512 frac = _mm512_sub_ps(u, _mm512_cvtepi32_ps(fl));
    const __m512i m = _mm512_mask_add_epi32(fl, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), fl, _mm512_set1_epi32(1));
    // L + m, or L - m where x < 0
    return _mm512_mask_sub_epi32(_mm512_add_epi32(levels, m), _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ),
                                 levels, m);
  }
};
#endif

template <int CB>
void quantize_bucket(const float* xb, int64_t len, const BucketWidth& w, const BucketJob& job,
                     const QuantNoise& bucket_noise, uint8_t* meta_dst, uint8_t* dst) {
  if (per_group_kernel(job.scale, w)) {
    quantize_groups(xb, one_group(len, w.bits, job.meta), job.rounding, bucket_noise, dst, meta_dst);
    return;
  }
  RoundingNoise noise(bucket_noise);
  using Code = std::conditional_t<(CB <= 8), uint8_t, uint16_t>;
  alignas(64) Code code_buf[kChunk];  // (kChunk,)
  alignas(64) uint16_t rnd[kChunk];   // (kChunk,)
  const bool stochastic = job.rounding == Rounding::Stochastic;
  const uint32_t levels = w.levels;
  if (!is_sign_magnitude(job.scale)) {
    float mn, mx;
    bucket_min_max(xb, len, mn, mx);
    const BucketGrid grid = affine_grid(group_params(mn, mx, w.bits, job.meta));
    store_bucket_meta(grid, job.scale, job.meta, meta_dst);
    const GroupParams& p = grid.affine;
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t n = std::min(kChunk, len - c);
      const float* xc = xb + c;
      if (stochastic) {
        noise.fill(c, n, rnd);
        for (int64_t i = 0; i < n; ++i) code_buf[i] = static_cast<Code>(quantize_value(xc[i], p, levels, uniform16(rnd[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) code_buf[i] = static_cast<Code>(quantize_value(xc[i], p, levels, 0.5f));
      }
      put_codes<CB>(code_buf, n, c, len, dst);
    }
  } else {
    const BucketGrid grid = sign_magnitude_grid(sign_magnitude_scale(bucket_scale(xb, len, job.scale), job.meta), levels);
    store_bucket_meta(grid, job.scale, job.meta, meta_dst);
    const float los = grid.levels_over_scale;
#if defined(__AVX512BW__) && defined(__BMI2__)
    if constexpr (packs_in_registers(CB)) {
      const SignMagnitudeCodes code_of(los, levels);
      const NoiseKey key = noise_key(bucket_noise.seed, bucket_noise.stream);
      for (int64_t c = 0; c < len; c += kChunk) {  // c: a multiple of the noise's 128-element blocks
        const int64_t n = std::min(kChunk, len - c);
        if (stochastic) group_simd::fill_noise_blocks(key, c >> 7, (c + n - 1) >> 7, rnd);
        group_simd::quantize_pack_with<CB>(xb + c, n, stochastic ? rnd : nullptr, dst + c * CB / 8, code_of);
      }
      return;
    }
#endif
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t n = std::min(kChunk, len - c);
      const float* xc = xb + c;
      if (stochastic) {
        noise.fill(c, n, rnd);
        for (int64_t i = 0; i < n; ++i)
          code_buf[i] = static_cast<Code>(quantize_sign_magnitude(xc[i], los, levels, uniform16(rnd[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) code_buf[i] = static_cast<Code>(quantize_sign_magnitude(xc[i], los, levels, 0.5f));
      }
      put_codes<CB>(code_buf, n, c, len, dst);
    }
  }
}

template <int CB>
void dequantize_bucket(const uint8_t* src, int64_t len, const BucketWidth& w, ScaleRule scale, MetaType meta,
                       const uint8_t* meta_src, float* out) {
  if (per_group_kernel(scale, w)) {
    dequantize_groups(src, meta_src, one_group(len, w.bits, meta), out);
    return;
  }
  using Code = std::conditional_t<(CB <= 8), uint8_t, uint16_t>;
  alignas(64) Code code_buf[kChunk];  // (kChunk,)
  const BucketGrid grid = load_bucket_meta(meta_src, scale, meta, w.levels);
  if (!is_sign_magnitude(scale)) {
    const GroupParams& p = grid.affine;
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t n = std::min(kChunk, len - c);
      get_codes<CB>(src, n, c, len, code_buf);
      float* oc = out + c;
      for (int64_t i = 0; i < n; ++i) oc[i] = dequantize_value(code_buf[i], p);
    }
  } else {
    const uint32_t levels = w.levels;
    const float sol = grid.scale_over_levels;
#if defined(__AVX512BW__) && defined(__BMI2__)
    if constexpr (packs_in_registers(CB)) {  // dequantize_sign_magnitude lane by lane
      const __m512i vlev = _mm512_set1_epi32(static_cast<int>(levels));
      const __m512 vsol = _mm512_set1_ps(sol);
      group_simd::unpack_with<CB>(src, len, out, [&](__m512i code) {
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(code, vlev)), vsol);
      });
      return;
    }
#endif
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t n = std::min(kChunk, len - c);
      get_codes<CB>(src, n, c, len, code_buf);
      float* oc = out + c;
      for (int64_t i = 0; i < n; ++i) oc[i] = dequantize_sign_magnitude(code_buf[i], sol, levels);
    }
  }
}

template <typename Fn>
void dispatch_code_bits(int bits, Fn&& fn) {
  if (!with_code_bits<kMaxCodeBits>(bits, fn))
    fail("mixed quantization: {}-bit codes are not supported (1 to {})", bits, kMaxCodeBits);
}

// ---- fused affine kernel ------------------------------------------------------------------
// Affine buckets at the widths per-group quantization packs: the same codes and bytes as
// quantize_groups on a one-group geometry with the bucket's own noise stream (the range,
// metadata, per-element rule and packing below are per-group quantization's), without the
// per-call setup and with the bucket's noise drawn in registers.


#if defined(__AVX512F__)

// 16 codes of x[0..16) with 16-bit noise lanes h (in 32-bit lanes), as quantize_value.
inline __m128i quantize16(const float* x, __m512 vmin, __m512 vinv, __m512i h, __m512i vlev, bool stochastic) {
  const __m512 zero = _mm512_setzero_ps(), half = _mm512_set1_ps(0.5f);
  const __m512 u = _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x), vmin), vinv), zero);
  const __m512 fl = _mm512_roundscale_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_sub_ps(u, fl);
  const __m512 r =
      stochastic ? group_simd::uniform16_lanes(h) : half;
  __m512i code = _mm512_cvttps_epi32(fl);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), code, _mm512_set1_epi32(1));
  return _mm512_cvtepi32_epi8(_mm512_min_epi32(code, vlev));
}
#endif


template <int B>
void quantize_affine_bucket(const float* xb, int64_t len, bool stochastic, MetaType meta, uint64_t seed,
                            uint64_t stream, uint8_t* meta_dst, uint8_t* dst) {
  constexpr uint32_t levels = (1u << B) - 1u;
  float mn, mx;
  group_simd::group_range(xb, len, mn, mx);
  const GroupParams p = group_params(mn, mx, B, meta);
  store_group_meta(p, meta, meta_dst);
  alignas(64) uint8_t code_buf[kChunk];  // (kChunk,)
  alignas(64) uint16_t rnd[128];         // (128,) one block's noise
#if defined(__AVX512F__)
  const __m512 vmin = _mm512_set1_ps(p.min), vinv = _mm512_set1_ps(p.inv_step);
  const __m512i vlev = _mm512_set1_epi32(static_cast<int>(levels));
#endif
  const NoiseKey key = noise_key(seed, stream);
  for (int64_t c = 0; c < len; c += kChunk) {
    const int64_t n = std::min(kChunk, len - c);
    for (int64_t k = 0; k < n; k += 128) {
      const int64_t e = c + k, m = std::min<int64_t>(128, n - k);
      const float* xk = xb + e;
      uint8_t* ck = code_buf + k;
      if (stochastic) simd::noise_block16(key, e >> 7, rnd);  // e: a multiple of 128
#if defined(__AVX512F__)
      int64_t i = 0;
      for (; i + 16 <= m; i += 16) {
        const __m512i hv = stochastic ? _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(rnd + i)))
                                      : _mm512_setzero_si512();
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ck + i), quantize16(xk + i, vmin, vinv, hv, vlev, stochastic));
      }
      for (; i < m; ++i) ck[i] = static_cast<uint8_t>(quantize_value(xk[i], p, levels, stochastic ? uniform16(rnd[i]) : 0.5f));
#else
      group_simd::quantize_run(xk, m, p, levels, stochastic ? rnd : nullptr, ck);
#endif
    }
    group_simd::pack_chunk<B>(code_buf, n, dst + c * B / 8);  // c is a multiple of 8: byte aligned
  }
}

template <typename Fn>
void dispatch_group_bits(int bits, Fn&& fn) {
  if (!group_simd::dispatch_group_width(bits, fn)) fail("mixed quantization: {} bits is not a per-group width", bits);
}

#pragma GCC diagnostic pop

int64_t bucket_grain(int64_t bucket_size) { return std::max<int64_t>(1, kMinParallelWork / bucket_size); }

template <typename T>
MixedPacked quantize_mixed_of(const T* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise,
                              const CodecWalk& walk) {
  c.check("mixed quantization");
  const BucketGeometry g = bucket_geometry(numel, c.bucket_size);
  MixedPacked p = mixed_packed_header(numel, c);

  std::vector<uint8_t> flags(static_cast<size_t>(g.buckets));  // (buckets,) 1 = mix width
  decide_buckets(g, c, noise, flags.data());
  // Buckets are quantized in ranges of `grain`; the code offset of each range's first bucket
  // (all buckets before the last are full, so a range's bytes follow from its mix count).
  const int64_t grain = bucket_grain(g.bucket_size);
  const int64_t ranges = (g.buckets + grain - 1) / grain;
  const int64_t base_bytes = packed_bytes(g.bucket_size, c.base.code_bits);
  const int64_t mix_bytes = packed_bytes(g.bucket_size, c.mix.code_bits);
  std::vector<int64_t> range_off(static_cast<size_t>(ranges + 1), 0);  // (ranges + 1,)
  for (int64_t r = 0; r < ranges; ++r) {
    const int64_t b0 = r * grain, b1 = std::min(g.buckets, b0 + grain);
    int64_t mixes = 0;
    for (int64_t b = b0; b < b1; ++b) mixes += flags[static_cast<size_t>(b)];
    p.mix_buckets += mixes;
    range_off[static_cast<size_t>(r + 1)] = range_off[static_cast<size_t>(r)] + mixes * mix_bytes + (b1 - b0 - mixes) * base_bytes;
  }
  if (g.buckets > 0) {  // the tail bucket: its own length
    const bool last_mix = flags[static_cast<size_t>(g.buckets - 1)] != 0;
    range_off.back() += packed_bytes(g.tail_len, last_mix ? c.mix.code_bits : c.base.code_bits) -
                        (last_mix ? mix_bytes : base_bytes);
  }
  p.uniform = p.mix_buckets == 0 || p.mix_buckets == g.buckets;
  p.uniform_is_mix = g.buckets > 0 && p.mix_buckets == g.buckets;

  const int mb = bucket_meta_bytes(c.scale, c.meta);
  DeviceScope on_cpu(Device::cpu());  // the CPU kernel's buffers
  p.codes = Tensor::empty(Shape{range_off.back()}, DType::u8);    // (code bytes,)
  p.meta_data = Tensor::empty(Shape{g.buckets * mb}, DType::u8);  // (buckets, meta bytes)
  if (!p.uniform) {
    p.flags = Tensor::empty(Shape{packed_bytes(g.buckets, 1)}, DType::u8);  // (buckets bits,)
    pack_bits(flags.data(), g.buckets, 1, p.flags.data<uint8_t>());
  }
  uint8_t* codes = p.codes.data<uint8_t>();
  uint8_t* meta = p.meta_data.data<uint8_t>();
#if defined(PACKRAT_PLANE_TILES)
  if (p.uniform) {  // one width: a blocked buffer's buckets of whole planes where they lie
    const BucketWidth& w = p.uniform_is_mix ? c.mix : c.base;
    if (const bucket_tiles::BucketTiling bt = bucket_tiles::bucket_tiling(g, walk, w.code_bits, c.scale); bt.applies()) {
      bucket_tiles::dispatch_tile_code_bits(w.code_bits, [&](auto cb) {
        bucket_tiles::quantize<decltype(cb)::value>(x, g, bt, walk, w.levels, c.rounding, noise, c.meta, codes, meta);
      });
      return p;
    }
  }
#endif
  const BucketJob job{c.scale, c.rounding, c.meta};
  const bool stochastic = c.rounding == Rounding::Stochastic;
  const bool fast_base = per_group_kernel(c.scale, c.base), fast_mix = per_group_kernel(c.scale, c.mix);
  auto run_range = [&](int64_t r) {
    const int64_t b0 = r * grain, b1 = std::min(g.buckets, b0 + grain);
    int64_t off = range_off[static_cast<size_t>(r)];
    std::optional<PlainRuns> plain;  // a blocked buffer's buckets in plain order
    if (walk.channels) plain.emplace(walk, g.bucket_size);
    StagedRuns<T> staged(g.start(b1 - 1) + g.len(b1 - 1));  // a plain bf16 buffer's buckets as f32
    for (int64_t b = b0; b < b1; ++b) {
      const bool is_mix = flags[static_cast<size_t>(b)] != 0;
      const BucketWidth& w = is_mix ? c.mix : c.base;
      const int64_t len = g.len(b);
      const float* xb = plain ? plain->read(x, g.start(b), len) : staged.read(x, g.start(b), len);
      const uint64_t stream = bucket_stream(noise.stream, static_cast<uint64_t>(b));
      if (is_mix ? fast_mix : fast_base) {
        dispatch_group_bits(w.bits, [&](auto cb) {
          quantize_affine_bucket<decltype(cb)::value>(xb, len, stochastic, c.meta, noise.seed, stream, meta + b * mb,
                                                      codes + off);
        });
      } else {
        dispatch_code_bits(w.code_bits, [&](auto cb) {
          quantize_bucket<decltype(cb)::value>(xb, len, w, job, QuantNoise{noise.seed, stream}, meta + b * mb,
                                               codes + off);
        });
      }
      off += packed_bytes(len, w.code_bits);
    }
  };
  parallel_ranges_local_first(ranges, run_range);  // as per-group quantization's ranges
  return p;
}

template <typename T>
void dequantize_mixed_to(const MixedPacked& p, T* out, const CodecWalk& walk) {
  const BucketGeometry g = p.geometry();
  if (g.buckets == 0) return;
  std::vector<uint8_t> flags(static_cast<size_t>(g.buckets), p.uniform_is_mix ? 1 : 0);  // (buckets,)
  if (!p.uniform) unpack_bits(p.flags.data<uint8_t>(), g.buckets, 1, flags.data());
  const std::vector<int64_t> off = bucket_code_offsets(g, p.base, p.mix, BucketFlags{flags.data()});  // (buckets + 1,)
  PACKRAT_CHECK(p.codes.numel() == off.back(), "mixed dequantization: {} code bytes held, the flags say {}",
                p.codes.numel(), off.back());
  const int mb = bucket_meta_bytes(p.scale, p.meta);
  const uint8_t* codes = p.codes.data<uint8_t>();
  const uint8_t* meta = p.meta_data.data<uint8_t>();
#if defined(PACKRAT_PLANE_TILES)
  if (p.uniform) {  // one width: quantize_mixed_of's tiles
    const BucketWidth& w = p.uniform_is_mix ? p.mix : p.base;
    if (const bucket_tiles::BucketTiling bt = bucket_tiles::bucket_tiling(g, walk, w.code_bits, p.scale); bt.applies()) {
      bucket_tiles::dispatch_tile_code_bits(w.code_bits, [&](auto cb) {
        bucket_tiles::dequantize<decltype(cb)::value>(codes, meta, g, bt, walk, w.levels, p.meta, out);
      });
      return;
    }
  }
#endif
  parallel_chunks(g.buckets, bucket_grain(g.bucket_size), [&](int64_t b0, int64_t b1) {
    std::optional<PlainRuns> plain;  // a blocked buffer's buckets in plain order, a bucket a run
    if (walk.channels) plain.emplace(walk, g.bucket_size);
    constexpr bool direct = std::is_same_v<T, float>;
    std::vector<float> run_values;  // a plain bf16 buffer's run of buckets, on its way to bf16
    for (int64_t b = b0; b < b1;) {
      const BucketWidth& w = flags[static_cast<size_t>(b)] ? p.mix : p.base;
      int64_t e = b + 1;  // a run of buckets at the same width (through `plain`: within one tile)
      while (e < b1 && flags[static_cast<size_t>(e)] == flags[static_cast<size_t>(b)] &&
             (!plain || plain->in_one_tile(g.start(b), g.start(e) + g.len(e) - g.start(b))))
        ++e;
      const int64_t n = g.start(e - 1) + g.len(e - 1) - g.start(b);
      float* ob = nullptr;
      if (plain) {
        ob = plain->write(out, g.start(b), n);
      } else if constexpr (direct) {
        ob = out + g.start(b);
      } else {
        run_values.resize(static_cast<size_t>(n));
        ob = run_values.data();
      }
      if (per_group_kernel(p.scale, w)) {
        // A run is a row of equal groups to the per-group dequantizer (codes and metadata contiguous).
        GroupQuantConfig gc;
        gc.bits = w.bits;
        gc.group_size = g.bucket_size;
        gc.grouping = Grouping::Flat;
        gc.meta = p.meta;
        dequantize_groups(codes + off[static_cast<size_t>(b)], meta + b * mb, group_geometry(n, 1, gc), ob);
      } else {
        for (int64_t k = b; k < e; ++k)
          dispatch_code_bits(w.code_bits, [&](auto cb) {
            dequantize_bucket<decltype(cb)::value>(codes + off[static_cast<size_t>(k)], g.len(k), w, p.scale, p.meta,
                                                   meta + k * mb, ob + (g.start(k) - g.start(b)));
          });
      }
      if constexpr (!direct)
        if (!plain) simd::f32_to_bf16_run(ob, n, out + g.start(b));  // rounded as Tensor::to rounds
      b = e;
    }
    if (plain) plain->finish(out);
  });
}

}  // namespace

MixedPacked quantize_mixed(const float* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise,
                           const CodecWalk& walk) {
  return quantize_mixed_of(x, numel, c, noise, walk);
}
MixedPacked quantize_mixed(const bf16_t* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise,
                           const CodecWalk& walk) {
  PACKRAT_CHECK(c.bucket_size <= kMaxStagedGroup,
                "quantize_mixed: buckets of {} bf16 values (the CPU kernels read bf16 in buckets of up to {})",
                c.bucket_size, kMaxStagedGroup);
  return quantize_mixed_of(x, numel, c, noise, walk);
}
void dequantize_mixed(const MixedPacked& p, float* out, const CodecWalk& walk) { dequantize_mixed_to(p, out, walk); }
void dequantize_mixed(const MixedPacked& p, bf16_t* out, const CodecWalk& walk) { dequantize_mixed_to(p, out, walk); }

}  // namespace packrat
