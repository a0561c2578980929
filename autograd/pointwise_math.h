#pragma once
// Branch-free f32 elementary functions for loops that GCC -O3 -march=native vectorises whole
// (selects, fma, bit casts; no libm calls): exp, expm1, log1p on [0, 1], exp(-x^2/2), the normal
// cdf and the logistic function. A few ulp relative against double libm where results are above
// FLT_MIN (below it they flush to 0, as with FTZ); see tests/autograd/activation_test.cpp.
// Used by the activations (pointwise.cpp) and softmax.
#include <bit>
#include <cmath>
#include <cstdint>

#define PACKRAT_INLINE inline __attribute__((always_inline))

namespace packrat::pwmath {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;       // Cody-Waite split of ln 2 (Cephes)
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kRoundMagic = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer

// exp(r) - 1 on |r| <= ln2/2 by its Taylor series to r^7 (truncation < 2e-8 relative).
PACKRAT_INLINE float expm1_reduced(float r) {
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  return std::fma(p * r, r, r);
}

// Argument reduction x + lo = n ln2 + r, |r| <= ln2/2 (x + lo: an argument held as an
// unevaluated sum, e.g. a square and its rounding error, so that a large x keeps its low bits).
// 2^n is built from its exponent bits with n clamped to [-127, 128]: 2^-127 has exponent bits 0
// and flushes to 0, 2^128 is inf. (Gradual underflow with two scale factors costs ~25% of the
// gelu loop; results below FLT_MIN = 1.2e-38 flush to 0, as with FTZ.)
struct Reduced {
  float r, scale;  // exp = (1 + expm1(r)) * scale
};
PACKRAT_INLINE Reduced reduce_exp(float x, float lo) {
  const float t = (x + lo) * kLog2e + kRoundMagic;  // n in the low mantissa bits
  const float n = t - kRoundMagic;
  int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRoundMagic));
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r) + lo;
  ni = ni < -127 ? -127 : ni;
  ni = ni > 128 ? 128 : ni;
  return {r, std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23)};
}

// exp(x + lo), the argument an unevaluated sum (lo: a few units at most, and x + lo <= 88 where
// lo != 0). Flushes to 0 below about -87.3 (FLT_MIN), inf from about 88.4; NaN propagates.
PACKRAT_INLINE float exp2parts(float x, float lo) {
  // Plain selects only (no && / ||), so that every loop using this stays if-converted.
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  const Reduced k = reduce_exp(xc, lo);
  return std::fma(k.scale, expm1_reduced(k.r), k.scale);
}
PACKRAT_INLINE float fast_exp(float x) { return exp2parts(x, 0.0f); }

// exp(x) - 1, accurate near 0: 2^n (e^r - 1) + (2^n - 1).
PACKRAT_INLINE float fast_expm1(float x) {
  float xc = x > 88.0f ? 88.0f : x;  // 2^n stays finite (callers use x <= 0)
  xc = xc < -30.0f ? -30.0f : xc;    // expm1(-30) = -1 in f32
  const Reduced k = reduce_exp(xc, 0.0f);  // n in [-44, 127]
  return std::fma(k.scale, expm1_reduced(k.r), k.scale - 1.0f);
}

// log(1 + u) for u in [0, 1]: 2 atanh(s), s = u / (2 + u) in [0, 1/3], series to s^17.
PACKRAT_INLINE float log1p_unit(float u) {
  const float s = u / (2.0f + u);
  const float z = s * s;
  float p = 1.0f / 17.0f;
  p = std::fma(p, z, 1.0f / 15.0f);
  p = std::fma(p, z, 1.0f / 13.0f);
  p = std::fma(p, z, 1.0f / 11.0f);
  p = std::fma(p, z, 1.0f / 9.0f);
  p = std::fma(p, z, 1.0f / 7.0f);
  p = std::fma(p, z, 1.0f / 5.0f);
  p = std::fma(p, z, 1.0f / 3.0f);
  return 2.0f * std::fma(s * z, p, s);
}

// exp(-x^2/2) with the square's rounding error carried into the reduction (fma split), so the
// result keeps its relative accuracy in the tails.
PACKRAT_INLINE float exp_neg_half_square(float x_any) {
  const float ax = std::fabs(x_any);
  const float x = ax < 16.0f ? ax : 16.0f;  // exp(-128) is 0 in f32; keeps x*x finite
  const float sq = x * x;
  const float err = std::fma(x, x, -sq);  // x*x = sq + err exactly
  return exp2parts(-0.5f * sq, -0.5f * err);
}

// Standard normal cdf Phi(x) = 0.5 erfc(-x / sqrt 2). erfc(a), a >= 0, as
// t exp(-a^2 + P(t)), t = 1 / (1 + a/2) (Numerical Recipes' erfcc, fractional error < 1.2e-7
// for every a >= 0), with -a^2 = -x^2/2 carried exactly.
PACKRAT_INLINE float normal_cdf(float x) {
  const float ax = std::fabs(x) < 16.0f ? std::fabs(x) : 16.0f;  // Phi(-16) = 6e-58: 0 in f32
  const float a = ax * 0.70710678118654752f;
  const float t = 1.0f / std::fma(0.5f, a, 1.0f);
  float p = 0.17087277f;
  p = std::fma(p, t, -0.82215223f);
  p = std::fma(p, t, 1.48851587f);
  p = std::fma(p, t, -1.13520398f);
  p = std::fma(p, t, 0.27886807f);
  p = std::fma(p, t, -0.18628806f);
  p = std::fma(p, t, 0.09678418f);
  p = std::fma(p, t, 0.37409196f);
  p = std::fma(p, t, 1.00002368f);
  p = std::fma(p, t, -1.26551223f);
  const float sq = ax * ax;
  const float err = std::fma(ax, ax, -sq);
  const float half_erfc = 0.5f * t * exp2parts(-0.5f * sq, std::fma(-0.5f, err, p));
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// Logistic pieces without overflow: e = exp(-|x|), sigmoid and 1 - sigmoid.
struct Logistic {
  float s, one_minus_s;
};
PACKRAT_INLINE Logistic logistic(float x) {
  const float e = fast_exp(-std::fabs(x));
  const float inv = 1.0f / (1.0f + e);
  const float big = inv, small = e * inv;  // 1/(1+e) >= 1/2, e/(1+e) <= 1/2
  return x >= 0.0f ? Logistic{big, small} : Logistic{small, big};
}

}  // namespace packrat::pwmath
