#pragma once
// bf16 <-> f32 on SIMD lanes, bit-identical to core/half.h's bf16_to_f32 and f32_to_bf16 (round to
// nearest, ties to even; a NaN keeps its upper bits with the quiet bit set): 16 lanes with
// AVX-512, 8 with AVX2, and runs of any length. The codecs read a 16-bit saved tensor and write a
// 16-bit one with these, in the pass that reads or writes it anyway, instead of a separate
// conversion pass through an f32 copy. The integer rounding, not AVX512_BF16's VCVTNEPS2BF16:
// that instruction flushes denormals to zero, which Tensor::to(bf16) does not. Internal to the
// CPU kernels: it includes immintrin.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/half.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers) wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::simd {

#if defined(__AVX512F__)
// 16 bf16 bit patterns to their f32 values (the bits in the upper half of each lane).
inline __m512 widen_bf16x16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m512 load_bf16x16(const bf16_t* p) {
  return widen_bf16x16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// f32_to_bf16 lane by lane, as 32-bit lanes holding the 16 bits.
inline __m512i bf16_bits16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
}
inline void store_bf16x16(bf16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits16(v)));
}
#endif

#if defined(__AVX2__)
inline __m256 load_bf16x8(const bf16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void store_bf16x8(bf16_t* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  // |u| > infinity's bits (signed compare: |u| < 2^31): a NaN, whose upper bits stay, quieted
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));  // lanes < 2^16
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
#endif

// out[i] = bf16_to_f32(x[i]), i < n. With AVX-512 the last partial row is masked, not a scalar
// loop: the codecs convert groups of a few dozen values, where a scalar tail took most of the time.
inline void bf16_to_f32_run(const bf16_t* x, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, load_bf16x16(x + i));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, k, widen_bf16x16(_mm256_maskz_loadu_epi16(k, x + i)));
  }
  return;
#elif defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, load_bf16x16(x + i));
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load_bf16x8(x + i));
#endif
  for (; i < n; ++i) out[i] = to_f32(x[i]);
}

// out[i] = f32_to_bf16(x[i]), i < n (the last partial row masked, as above).
inline void f32_to_bf16_run(const float* x, int64_t n, bf16_t* out) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  for (; i + 16 <= n; i += 16) store_bf16x16(out + i, _mm512_loadu_ps(x + i));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(out + i, k, _mm512_cvtepi32_epi16(bf16_bits16(_mm512_maskz_loadu_ps(k, x + i))));
  }
  return;
#elif defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) store_bf16x16(out + i, _mm512_loadu_ps(x + i));
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) store_bf16x8(out + i, _mm256_loadu_ps(x + i));
#endif
  for (; i < n; ++i) out[i] = from_f32<bf16_t>(x[i]);
}

// out[i] = x[i] as f32, i < n: bf16 on SIMD lanes (GCC vectorises the scalar widening poorly:
// half the speed), f32 copied, other types (f16) value by value.
template <typename T>
inline void to_f32_run(const T* x, int64_t n, float* out) {
  if constexpr (std::is_same_v<T, bf16_t>) bf16_to_f32_run(x, n, out);
  else if constexpr (std::is_same_v<T, float>) std::copy(x, x + n, out);
  else for (int64_t i = 0; i < n; ++i) out[i] = to_f32(x[i]);
}

// The n values at x as f32: x itself for f32, else widened into buf (n of them), whose f32 copy is
// returned. A kernel reads an f32 run where it lies and a 16-bit one through buf in L1.
template <typename T>
inline const float* f32_values(const T* x, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    to_f32_run(x, n, buf);
    return buf;
  }
}

// out[i] = x[i] rounded to T, i < n (the rounding of Tensor::to).
template <typename T>
inline void from_f32_run(const float* x, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, bf16_t>) f32_to_bf16_run(x, n, out);
  else if constexpr (std::is_same_v<T, float>) std::copy(x, x + n, out);
  else for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(x[i]);
}

}  // namespace packrat::simd

#pragma GCC diagnostic pop
