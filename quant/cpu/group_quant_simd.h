#pragma once
// The SIMD building blocks of per-group quantization, shared by the per-group kernels
// (group_quant_cpu.cpp) and the mixed-precision bucket kernels (mixed_quant_cpu.cpp) so that both draw
// the same noise, reduce ranges in the same order and pack the same layout, on AVX-512 or AVX2
// (per-ISA lane types, one algorithm) and plain C++ otherwise. Internal: included by those two
// .cpp files and their test only (it includes immintrin.h).
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/cpu/noise_hash_simd.h"
#include "core/cpu/philox_simd.h"
#include "quant/group/group_quant.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers) wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::group_simd {

// The Philox lanes of the mixed codec's bucket decisions are core's (core/cpu/philox_simd.h).
#if defined(__AVX512F__)
using simd::philox16;
#endif

// uniform16 of noise values h (16 bits, widened to 32-bit lanes): (h + 0.5) / 2^16 = h 2^-16 + 2^-17,
// one FMA after the conversion, exact (2 h + 1 < 2^17 fits a float's mantissa): the same floats as
// an add and a multiply, one instruction fewer a row of the quantize.
#if defined(__AVX512F__)
inline __m512 uniform16_lanes(__m512i h) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), _mm512_set1_ps(0x1p-16f), _mm512_set1_ps(0x1p-17f));
}
#endif
#if defined(__AVX2__)
inline __m256 uniform16_lanes(__m256i h) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(0x1p-16f), _mm256_set1_ps(0x1p-17f));
}
#endif

// out[i] = rounding_noise16 of element 128 * b0 + i, for the blocks [b0, b1] of the stream keyed
// `key` (callers that draw a block or two at a time keep the key: three splitmix64 a call).
inline void fill_noise_blocks(const NoiseKey& key, int64_t b0, int64_t b1, uint16_t* out) {
  for (int64_t b = b0; b <= b1; ++b) simd::noise_block16(key, b, out + (b - b0) * 128);
}
inline void fill_noise_blocks(const QuantNoise& noise, int64_t b0, int64_t b1, uint16_t* out) {
  fill_noise_blocks(noise_key(noise.seed, noise.stream), b0, b1, out);
}

#if defined(__AVX512F__)
// 16 floats: one register.
struct Floats16 {
  __m512 v;
  static Floats16 broadcast(float f) { return {_mm512_set1_ps(f)}; }
  static Floats16 load(const float* x) { return {_mm512_loadu_ps(x)}; }
  // min / max lane by lane; where either is NaN, the second operand (MINPS's rule).
  static Floats16 min(Floats16 a, Floats16 b) { return {_mm512_min_ps(a.v, b.v)}; }
  static Floats16 max(Floats16 a, Floats16 b) { return {_mm512_max_ps(a.v, b.v)}; }
  void store(float* out) const { _mm512_storeu_ps(out, v); }
};
#elif defined(__AVX2__)
// 16 floats: two registers.
struct Floats16 {
  __m256 lo, hi;
  static Floats16 broadcast(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static Floats16 load(const float* x) { return {_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)}; }
  static Floats16 min(Floats16 a, Floats16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static Floats16 max(Floats16 a, Floats16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  void store(float* out) const {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
  }
};
#endif

// min and max of x[0..n), n >= 1: the plain scan (x < mn from the first value; the tail loop
// below), which the reference and the GPU's RangeScan (quant/group/group_quant_warp.h) give. With SIMD,
// 16 lanes as RangeScan's lanes: each starts from the first value and skips NaNs (min / max
// return their second operand, the lane's extreme, where either is NaN), and what the order
// changes is settled after: a NaN first value, which the scan keeps, and the sign of a zero
// extreme, the scan's first zero.
inline void group_range(const float* x, int64_t n, float& mn_out, float& mx_out) {
#if defined(__AVX512F__)
  // Every length in registers: the last partial register's missing lanes read as x[0] (a value the
  // scan starts from), so no scalar tail (groups of 25 or 28 values spent their last 9 or 12 there)
  // and no round trip of the lanes through the stack; the lanes' order is settled as below.
  {
    const __m512 first = _mm512_set1_ps(x[0]);
    __m512 vmn = first, vmx = first;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = n - i < 16 ? static_cast<__mmask16>((1u << (n - i)) - 1u) : static_cast<__mmask16>(0xFFFF);
      const __m512 v = _mm512_mask_loadu_ps(first, k, x + i);
      vmn = _mm512_min_ps(v, vmn);
      vmx = _mm512_max_ps(v, vmx);
    }
    // No lane holds a NaN unless x[0] is one (settled below): the tree gives the extremes.
    float mn = _mm512_reduce_min_ps(vmn), mx = _mm512_reduce_max_ps(vmx);
    if (x[0] != x[0]) {
      mn = mx = x[0];
    } else if (mn == 0.0f || mx == 0.0f) {
      int64_t z = 0;
      while (x[z] != 0.0f) ++z;  // a zero extreme is one of x's zeros: the scan keeps the first
      if (mn == 0.0f) mn = x[z];
      if (mx == 0.0f) mx = x[z];
    }
    mn_out = mn;
    mx_out = mx;
    return;
  }
#endif
  float mn = x[0], mx = x[0];
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  const bool lanes = n >= 16;
  if (lanes) {
    Floats16 vmn = Floats16::broadcast(x[0]), vmx = vmn;
    for (; i + 16 <= n; i += 16) {
      const Floats16 v = Floats16::load(x + i);
      vmn = Floats16::min(v, vmn);
      vmx = Floats16::max(v, vmx);
    }
    float lo[16], hi[16];
    vmn.store(lo);
    vmx.store(hi);
    for (int k = 0; k < 16; ++k) {
      mn = lo[k] < mn ? lo[k] : mn;
      mx = hi[k] > mx ? hi[k] : mx;
    }
  }
#endif
  for (; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
#if defined(__AVX512F__) || defined(__AVX2__)
  if (lanes) {
    if (x[0] != x[0]) {
      mn = mx = x[0];
    } else if (mn == 0.0f || mx == 0.0f) {
      int64_t z = 0;
      while (x[z] != 0.0f) ++z;  // a zero extreme is one of x's zeros
      if (mn == 0.0f) mn = x[z];
      if (mx == 0.0f) mx = x[z];
    }
  }
#endif
  mn_out = mn;
  mx_out = mx;
}

// codes[i] = quantize_value(x[i], p, levels, uniform16(rnd[i])) (rnd null: nearest), n elements.
inline void quantize_run(const float* x, int64_t n, const GroupParams& p, uint32_t levels, const uint16_t* rnd,
                         uint8_t* codes) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vmin = _mm512_set1_ps(p.min), vinv = _mm512_set1_ps(p.inv_step), zero = _mm512_setzero_ps();
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i one = _mm512_set1_epi32(1), vlev = _mm512_set1_epi32(static_cast<int>(levels));
  for (; i + 16 <= n; i += 16) {
    const __m512 u = _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmin), vinv), zero);
    const __m512 fl = _mm512_roundscale_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_sub_ps(u, fl);
    __m512 r = half;
    if (rnd) {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rnd + i)));
      r = uniform16_lanes(h);
    }
    __m512i code = _mm512_cvttps_epi32(fl);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), code, one);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(_mm512_min_epi32(code, vlev)));
  }
#elif defined(__AVX2__)
  // The AVX-512 loop's arithmetic on two halves of 8, the codes narrowed by two packs: 1.4x GCC's
  // vectorisation of the loop below (0.25 against 0.35 ns a value, 2 bits, L1-resident, AVX2 EPYC).
  const __m256 vmin = _mm256_set1_ps(p.min), vinv = _mm256_set1_ps(p.inv_step), zero = _mm256_setzero_ps();
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256i vlev = _mm256_set1_epi32(static_cast<int>(levels));
  for (; i + 16 <= n; i += 16) {
    __m256i code[2];  // (2 halves, 8 lanes)
    for (int h = 0; h < 2; ++h) {
      const __m256 u = _mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * h), vmin), vinv), zero);
      const __m256 fl = _mm256_round_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 frac = _mm256_sub_ps(u, fl);
      __m256 r = half;
      if (rnd) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rnd + i + 8 * h)));
        r = uniform16_lanes(w);
      }
      const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(r, frac, _CMP_LT_OQ));  // -1 where rounded up
      code[h] = _mm256_min_epi32(_mm256_sub_epi32(_mm256_cvttps_epi32(fl), up), vlev);
    }
    // packus interleaves the halves' 128-bit lanes; the permute puts the 16 words back in order.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(code[0], code[1]), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
  }
#endif
  for (; i < n; ++i)
    codes[i] = static_cast<uint8_t>(quantize_value(x[i], p, levels, rnd ? uniform16(rnd[i]) : 0.5f));
}

#if defined(__AVX512BW__)
// The first min(n, 64) codes of B in {2, 4} bits (one a byte) at codes -> their packed_bytes
// at dst, pack_group_codes' layout. Masked loads and stores: nothing past either end is touched.
template <int B>
inline void pack64(const uint8_t* codes, int64_t n, uint8_t* dst) {
  n = n < 64 ? n : 64;
  const __mmask64 in = n == 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
  const uint64_t bytes = static_cast<uint64_t>(packed_bytes(n, B));
  const __m512i w = _mm512_maskz_loadu_epi8(in, codes);
  if constexpr (B == 2) {  // 32-bit lane c0|c1<<8|c2<<16|c3<<24 -> c0|c1<<2|c2<<4|c3<<6
    const __m512i p = _mm512_or_si512(_mm512_or_si512(w, _mm512_srli_epi32(w, 6)),
                                      _mm512_or_si512(_mm512_srli_epi32(w, 12), _mm512_srli_epi32(w, 18)));
    _mm_mask_storeu_epi8(dst, static_cast<__mmask16>((uint64_t{1} << bytes) - 1), _mm512_cvtepi32_epi8(p));
  } else {  // 16-bit lane c0|c1<<8 -> c0|c1<<4
    const __m512i p = _mm512_or_si512(w, _mm512_srli_epi16(w, 4));
    _mm256_mask_storeu_epi8(dst, static_cast<__mmask32>((uint64_t{1} << bytes) - 1), _mm512_cvtepi16_epi8(p));
  }
}
#endif

// Packs n codes at a byte boundary; fast paths for 2 and 4 bits, same layout as pack_group_codes.
template <int B>
inline void pack_chunk(const uint8_t* codes, int64_t n, uint8_t* dst) {
  if constexpr (B == 8) {
    std::memcpy(dst, codes, static_cast<size_t>(n));
  } else if constexpr (B == 2 || B == 4) {
    int64_t i = 0;
#if defined(__AVX512BW__)
    for (; i < n; i += 64) pack64<B>(codes + i, n - i, dst + i * B / 8);  // a group of 49: one pass
    return;
#endif
    constexpr int per = 8 / B;
#if defined(__AVX2__)
    // 32 codes at a time into 8 or 16 bytes, pack64's arithmetic on 8 dwords or 16 words, whose low
    // bytes a byte shuffle gathers per 128-bit half.
    for (; i + 32 <= n; i += 32) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
      if constexpr (B == 2) {
        const __m256i p = _mm256_or_si256(_mm256_or_si256(w, _mm256_srli_epi32(w, 6)),
                                          _mm256_or_si256(_mm256_srli_epi32(w, 12), _mm256_srli_epi32(w, 18)));
        const __m256i low = _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                                    -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                                                    -1, -1, -1, -1, -1));
        const uint64_t bytes = static_cast<uint32_t>(_mm256_extract_epi32(low, 0)) |
                               static_cast<uint64_t>(static_cast<uint32_t>(_mm256_extract_epi32(low, 4))) << 32;
        std::memcpy(dst + i / 4, &bytes, 8);
      } else {
        const __m256i p = _mm256_or_si256(w, _mm256_srli_epi16(w, 4));
        const __m256i low = _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1,
                                                                    -1, 0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1,
                                                                    -1, -1, -1));
        const __m256i halves = _mm256_permute4x64_epi64(low, 0x08);  // qwords 0 and 2 in the low 128 bits
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i / 2), _mm256_castsi256_si128(halves));
      }
    }
#endif
    // Four codes a 32-bit word, shifted together (pack64's arithmetic): c0|c1<<8|c2<<16|c3<<24
    // -> c0|c1<<2|c2<<4|c3<<6 (one byte), or c0|c1<<4 and c2|c3<<4 (two).
    for (; i + 4 <= n; i += 4) {
      uint32_t w;
      std::memcpy(&w, codes + i, 4);
      if constexpr (B == 2) {
        w |= w >> 6;
        w |= w >> 12;
        dst[i / 4] = static_cast<uint8_t>(w);
      } else {
        w |= w >> 4;
        dst[i / 2] = static_cast<uint8_t>(w);
        dst[i / 2 + 1] = static_cast<uint8_t>(w >> 16);
      }
    }
    if (i < n) pack_group_codes(codes + i, n - i, B, dst + i / per);
  } else {
    pack_group_codes(codes, n, B, dst);
  }
}

#if defined(__AVX512BW__) && defined(__BMI2__)
// Fused quantize + pack_chunk<B> (the same bytes): 16 values a register, code_of(values, uniforms)
// their codes (each below 2^B; the uniforms uniform16 of rnd's noise, or 0.5 where rnd is null),
// packed in registers (one byte each, then pext gathers their low B bits: 16 codes are 2B
// bytes), the last partial register by masked loads and stores. Nothing goes through memory between
// the two steps: quantize_run's byte stores read back by pack64's wider masked load failed store
// forwarding on Zen 4 (a third of the 2-bit quantize in perf), and groups of 25 or 28 values (per-plane
// groups of 7x7 and 14x14 planes) took their last 9 or 12 values one by one. Writes
// packed_bytes(n, B) bytes at dst; reads x[0, n) and rnd[0, n) only. B in {1, 2, 3, 4, 8}.
template <int B, typename CodeOf>
inline void quantize_pack_with(const float* x, int64_t n, const uint16_t* rnd, uint8_t* dst, CodeOf&& code_of) {
  constexpr uint32_t levels = (1u << B) - 1u;
  constexpr uint64_t sel = 0x0101010101010101ull * levels;  // the low B bits of each byte
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    const __mmask16 k = static_cast<__mmask16>((1u << m) - 1u);
    __m512 r = half;  // uniform16 of the noise, lane by lane
    if (rnd) {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, rnd + i));
      r = uniform16_lanes(h);
    }
    // lanes past m read as zero, their codes zeroed
    const __m512i code = _mm512_maskz_mov_epi32(k, code_of(_mm512_maskz_loadu_ps(k, x + i), r));
    const __m128i bytes = _mm512_cvtepi32_epi8(code);  // (16,) one code a byte
    uint8_t* d = dst + i * B / 8;  // i is a multiple of 16: byte aligned
    if constexpr (B == 8) {
      _mm_mask_storeu_epi8(d, k, bytes);
    } else {
      const uint64_t w = _pext_u64(static_cast<uint64_t>(_mm_cvtsi128_si64(bytes)), sel) |
                         _pext_u64(static_cast<uint64_t>(_mm_extract_epi64(bytes, 1)), sel) << (8 * B);
      if (m == 16) {
        std::memcpy(d, &w, 2 * B);
      } else {
        const int64_t nb = packed_bytes(m, B);
        _mm_mask_storeu_epi8(d, static_cast<__mmask16>((1u << nb) - 1u), _mm_cvtsi64_si128(static_cast<int64_t>(w)));
      }
    }
  }
}

// quantize_pack_with's packing of the affine codes (quantize_value's arithmetic lane by lane).
template <int B>
inline void quantize_pack(const float* x, int64_t n, const GroupParams& p, const uint16_t* rnd, uint8_t* dst) {
  const __m512 vmin = _mm512_set1_ps(p.min), vinv = _mm512_set1_ps(p.inv_step), zero = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi32(1), vlev = _mm512_set1_epi32(static_cast<int>((1u << B) - 1u));
  quantize_pack_with<B>(x, n, rnd, dst, [&](__m512 v, __m512 r) {
    const __m512 u = _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(v, vmin), vinv), zero);
    const __m512 fl = _mm512_roundscale_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_sub_ps(u, fl);
    __m512i code = _mm512_cvttps_epi32(fl);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), code, one);
    return _mm512_min_epi32(code, vlev);
  });
}

// Fused unpack_chunk<B> + a value per code: out[i, i + 16) = value_of(codes i .. i + 15, in 32-bit
// lanes) for the n codes packed at src (byte aligned), 16 a register (pdep spreads 2B bytes into 16
// code bytes), the last partial register by masked loads and stores. B in {1, 2, 3, 4, 8}. Reads
// packed_bytes(n, B) bytes, writes out[0, n).
template <int B, typename ValueOf>
inline void unpack_with(const uint8_t* src, int64_t n, float* out, ValueOf&& value_of) {
  constexpr uint64_t sel = 0x0101010101010101ull * ((1u << B) - 1u);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    const __mmask16 k = static_cast<__mmask16>((1u << m) - 1u);
    const uint8_t* s = src + i * B / 8;
    __m128i bytes;  // (16,) one code a byte
    if constexpr (B == 8) {
      bytes = _mm_maskz_loadu_epi8(k, s);
    } else {
      uint64_t w = 0;
      if (m == 16) {
        if constexpr (B == 3) {  // 4 + 2 bytes in registers (a 6-byte memcpy went through the stack)
          uint32_t a;
          uint16_t b;
          std::memcpy(&a, s, 4);
          std::memcpy(&b, s + 4, 2);
          w = a | static_cast<uint64_t>(b) << 32;
        } else {
          std::memcpy(&w, s, 2 * B);
        }
      } else {
        const int64_t nb = packed_bytes(m, B);
        w = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1u), s)));
      }
      bytes = _mm_set_epi64x(static_cast<int64_t>(_pdep_u64(w >> (8 * B), sel)), static_cast<int64_t>(_pdep_u64(w, sel)));
    }
    _mm512_mask_storeu_ps(out + i, k, value_of(_mm512_cvtepu8_epi32(bytes)));
  }
}

// unpack_with's values of the affine codes: dequantize_value lane by lane.
template <int B>
inline void unpack_dequantize(const uint8_t* src, int64_t n, const GroupParams& p, float* out) {
  const __m512 vmin = _mm512_set1_ps(p.min), vstep = _mm512_set1_ps(p.step);
  unpack_with<B>(src, n, out, [&](__m512i code) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(code), vstep, vmin); });
}
#endif

// Calls fn(std::integral_constant<int, B>) for the per-group widths B in {1, 2, 3, 4, 8};
// false (fn not called) for any other width, so that each caller names its own error.
template <typename Fn>
bool dispatch_group_width(int bits, Fn&& fn) {
  switch (bits) {
    case 1: fn(std::integral_constant<int, 1>{}); return true;
    case 2: fn(std::integral_constant<int, 2>{}); return true;
    case 3: fn(std::integral_constant<int, 3>{}); return true;
    case 4: fn(std::integral_constant<int, 4>{}); return true;
    case 8: fn(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}

}  // namespace packrat::group_simd

#pragma GCC diagnostic pop
