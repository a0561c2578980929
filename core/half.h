#pragma once
// The 16-bit floating-point formats packrat tensors hold (DType::bf16, DType::f16), and their conversions to
// and from f32: the per-element logic every backend's convert and every kernel that reads or writes 16-bit
// data shares (PACKRAT_HD), so a value converted on the CPU is bit-identical to the same value converted on a
// GPU.
//
//   bf16  1 sign, 8 exponent, 7 mantissa bits: the upper half of an f32, same range.
//   f16   IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max 65504, subnormals
//         down to 2^-24.
// f32 -> 16 bits rounds to nearest, ties to even, as PyTorch converts (c10::BFloat16, c10::Half); NaN stays a
// quiet NaN, f16 overflow becomes infinity. 16 bits -> f32 is exact.
#include <cstdint>

#include "core/hd.h"

namespace packrat {

// The element types of bf16 and f16 tensors (Tensor::data<bf16_t>()): the raw 16 bits, so no arithmetic
// happens on them by accident.
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

// Bit casts: the device's intrinsics, and on the host a builtin (a memcpy through a local kept GCC
// from vectorising the loops that use them: the fp8 codec's).
PACKRAT_HD inline uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}
PACKRAT_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// ---- bf16 ---------------------------------------------------------------------------------

PACKRAT_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// Round to nearest, ties to even (NaN stays NaN).
PACKRAT_HD inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t bias = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}
// A NaN's bf16, the same on every device: the quiet NaN 0x7FC0, whatever the payload (a GPU's
// arithmetic makes 0x7FFFFFFF, which rounded up by its bits would carry into the sign: -0.0).
constexpr uint16_t kBf16QuietNan = 0x7FC0;
PACKRAT_HD inline bool f32_bits_nan(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
// Largest bf16 <= x (finite x; a NaN gives kBf16QuietNan).
PACKRAT_HD inline uint16_t f32_to_bf16_down(float x) {
  const uint32_t u = f32_bits(x);
  if (f32_bits_nan(u)) return kBf16QuietNan;
  const uint16_t t = static_cast<uint16_t>(u >> 16);  // truncation: toward zero
  if ((u & 0xFFFFu) == 0 || !(u >> 31)) return t;     // exact, or positive: truncation is down
  return static_cast<uint16_t>(t + 1);                // negative inexact: one ulp further from zero
}
// Smallest bf16 >= x (finite x; a NaN gives kBf16QuietNan).
PACKRAT_HD inline uint16_t f32_to_bf16_up(float x) {
  const uint32_t u = f32_bits(x);
  if (f32_bits_nan(u)) return kBf16QuietNan;
  const uint16_t t = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFFu) == 0 || (u >> 31)) return t;  // exact, or negative: truncation is up
  return static_cast<uint16_t>(t + 1);
}

// ---- f16 ----------------------------------------------------------------------------------

// Integer-only (no FPU rounding mode or flush-to-zero involved), so host and device agree.
PACKRAT_HD inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u)  // infinity, or NaN (quiet, keeping the top payload bits)
    return static_cast<uint16_t>(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u | ((a >> 13) & 0x3FFu) : 0u));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: rounds past 65504
  if (a >= 0x38800000u) {                                              // normal in f16 (>= 2^-14): rebias the exponent,
                                                                       // round 13 bits away
    const uint32_t r = a - 0x38000000u;
    uint32_t q = r >> 13;
    const uint32_t rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t e = a >> 23;                       // subnormal in f16: units of 2^-24
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25 (and f32 subnormals): zero
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may reach 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

PACKRAT_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return f32_from_bits(sign);
    e = 113;  // subnormal m * 2^-24: normalise
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    return f32_from_bits(sign | (e << 23) | ((m & 0x3FFu) << 13));
  }
  return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

// ---- typed helpers for kernels templated on their element type ------------------------------

PACKRAT_HD inline float to_f32(float x) { return x; }
PACKRAT_HD inline float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }
PACKRAT_HD inline float to_f32(f16_t x) { return f16_to_f32(x.bits); }
template <typename T>
PACKRAT_HD inline T from_f32(float x);
template <>
PACKRAT_HD inline float from_f32<float>(float x) {
  return x;
}
template <>
PACKRAT_HD inline bf16_t from_f32<bf16_t>(float x) {
  return bf16_t{f32_to_bf16(x)};
}
template <>
PACKRAT_HD inline f16_t from_f32<f16_t>(float x) {
  return f16_t{f32_to_f16(x)};
}

// One element of type S as type D: through f32 where either side is 16-bit (f64 -> bf16 rounds twice, as
// PyTorch's conversion does), a plain cast otherwise. What convert and fill do per element.
template <typename T>
inline constexpr bool is_half_type = false;
template <>
inline constexpr bool is_half_type<bf16_t> = true;
template <>
inline constexpr bool is_half_type<f16_t> = true;
template <typename D, typename S>
PACKRAT_HD inline D cast_element(S s) {
  if constexpr (is_half_type<S> && is_half_type<D>) {
    return from_f32<D>(to_f32(s));
  } else if constexpr (is_half_type<S>) {
    return static_cast<D>(to_f32(s));
  } else if constexpr (is_half_type<D>) {
    return from_f32<D>(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

}  // namespace packrat
