#pragma once
// The math of the pointwise activations, written once for every device: branch-free f32
// elementary functions (exp, expm1, log1p on [0, 1], exp(-x^2/2), the normal cdf, the logistic
// function) and, on them, f and f' of each activation (Activation<id>), PyTorch's definitions
// (torch.nn.functional; CPU kernels in aten/src/ATen/native/cpu/Activation.cpp and
// UnaryOpsKernel.cpp, backward formulas from tools/autograd/derivatives.yaml).
//
// CPU: selects, fma and bit casts with no libm calls, so that GCC -O3 -march=native vectorises
// the loops over them whole (core/cpu/pointwise_loops.cpp). GPU: the same functions are
// PACKRAT_HD, and the CUDA kernels (core/cuda/kernels/pointwise.h) call them, so both devices
// compute the same formula (they may differ in the last bit where the compilers contract a
// multiply-add differently). Accuracy: a few ulp relative against double libm where results are
// above FLT_MIN (below it they flush to 0, as with FTZ); see tests/autograd/activation_test.cpp.
// Also used by softmax (fast_exp).
#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/activation_id.h"
#include "core/hd.h"

// Inlined into every loop and kernel that calls it (vectorisation needs the whole body).
#if defined(__CUDACC__)
#define PACKRAT_INLINE __host__ __device__ __forceinline__
#else
#define PACKRAT_INLINE inline __attribute__((always_inline))
#endif

namespace packrat::pwmath {

// Bit casts that compile on both devices (std::bit_cast is constexpr host code for nvcc).
PACKRAT_INLINE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
PACKRAT_INLINE float float_of_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}

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
  int32_t ni = static_cast<int32_t>(bits_of(t) - bits_of(kRoundMagic));
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r) + lo;
  ni = ni < -127 ? -127 : ni;
  ni = ni > 128 ? 128 : ni;
  return {r, float_of_bits(static_cast<uint32_t>(ni + 127) << 23)};
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

// ---------------------------------------------------------------------------------------------
// The activations: f and f' as scalar inline functions, the bodies of the CPU loops and the CUDA
// kernels.

// relu: max(x, 0); PyTorch saves the result and passes grad where result > 0.
PACKRAT_INLINE float relu_f(float x) { return x > 0.0f ? x : 0.0f; }
PACKRAT_INLINE float relu_df(float x) { return x > 0.0f ? 1.0f : 0.0f; }
PACKRAT_INLINE float relu_df_from_y(float y) { return relu_df(y); }  // y > 0 exactly where x > 0

// leaky_relu, negative_slope 0.01: grad * (x > 0 ? 1 : slope).
constexpr float kLeakySlope = 0.01f;
PACKRAT_INLINE float leaky_relu_f(float x) { return x > 0.0f ? x : x * kLeakySlope; }
PACKRAT_INLINE float leaky_relu_df(float x) { return x > 0.0f ? 1.0f : kLeakySlope; }

// relu6 = hardtanh(x, 0, 6); hardtanh_backward passes grad strictly inside (0, 6).
PACKRAT_INLINE float relu6_f(float x) {
  const float y = x > 0.0f ? x : 0.0f;
  return y < 6.0f ? y : 6.0f;
}
PACKRAT_INLINE float relu6_df(float x) {
  const float inside = x < 6.0f ? 1.0f : 0.0f;
  return x > 0.0f ? inside : 0.0f;
}

// hardswish: x * min(max(x + 3, 0), 6) / 6; backward (PyTorch 1.13's hardswish_backward):
// 0 below -3, x/3 + 1/2 on [-3, 3), 1 from 3 on.
PACKRAT_INLINE float hardswish_f(float x) {
  float r = x + 3.0f;
  r = r > 0.0f ? r : 0.0f;
  r = r < 6.0f ? r : 6.0f;
  return x * r / 6.0f;
}
PACKRAT_INLINE float hardswish_df(float x) {
  const float mid = x / 3.0f + 0.5f;
  return x < -3.0f ? 0.0f : (x < 3.0f ? mid : 1.0f);
}

// gelu (approximate='none'): x Phi(x); f' = Phi(x) + x phi(x).
PACKRAT_INLINE float gelu_f(float x) { return x * normal_cdf(x); }
PACKRAT_INLINE float gelu_df(float x) { return std::fma(x * kInvSqrt2Pi, exp_neg_half_square(x), normal_cdf(x)); }

// silu: x sigmoid(x); f' = s (1 + x (1 - s)).
PACKRAT_INLINE float silu_f(float x) { return x * logistic(x).s; }
PACKRAT_INLINE float silu_df(float x) {
  const Logistic l = logistic(x);
  return l.s * std::fma(x, l.one_minus_s, 1.0f);
}

// sigmoid: PyTorch saves the result; f' = y (1 - y).
PACKRAT_INLINE float sigmoid_f(float x) { return logistic(x).s; }
PACKRAT_INLINE float sigmoid_df(float x) {
  const Logistic l = logistic(x);
  return l.s * l.one_minus_s;
}
PACKRAT_INLINE float sigmoid_df_from_y(float y) { return y * (1.0f - y); }

// tanh: odd minimax polynomial below 0.625 (Cephes tanhf), else 1 - 2 / (exp(2|x|) + 1).
PACKRAT_INLINE float tanh_f(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = std::fma(p, z, 2.06390887954e-2f);
  p = std::fma(p, z, -5.37397155531e-2f);
  p = std::fma(p, z, 1.33314422036e-1f);
  p = std::fma(p, z, -3.33332819422e-1f);
  const float small = std::fma(p * z, x, x);
  const float e = fast_exp(2.0f * (ax < 44.0f ? ax : 44.0f));
  const float big = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : big;
}
PACKRAT_INLINE float tanh_df(float x) {
  // 1 - tanh^2 = 4 e / (1 + e)^2, e = exp(-2|x|): no cancellation for large |x|.
  const float e = fast_exp(-2.0f * std::fabs(x));
  const float d = 1.0f + e;
  return 4.0f * e / (d * d);
}
PACKRAT_INLINE float tanh_df_from_y(float y) { return std::fma(-y, y, 1.0f); }

// elu(x, alpha, scale): x > 0 ? scale x : scale alpha (exp(x) - 1); backward (is_result false)
// x <= 0 ? scale alpha exp(x) : scale.
PACKRAT_INLINE float elu_f(float x, float alpha, float scale) {
  const float neg = scale * alpha * fast_expm1(x < 0.0f ? x : 0.0f);
  return x > 0.0f ? scale * x : neg;
}
PACKRAT_INLINE float elu_df(float x, float alpha, float scale) {
  const float neg = scale * alpha * fast_exp(x < 0.0f ? x : 0.0f);
  return x <= 0.0f ? neg : scale;
}
constexpr float kSeluAlpha = 1.6732632423543772848170429916717f;
constexpr float kSeluScale = 1.0507009873554804934193349852946f;
PACKRAT_INLINE float selu_f(float x) { return elu_f(x, kSeluAlpha, kSeluScale); }
PACKRAT_INLINE float selu_df(float x) { return elu_df(x, kSeluAlpha, kSeluScale); }
PACKRAT_INLINE float elu_f(float x) { return elu_f(x, 1.0f, 1.0f); }
PACKRAT_INLINE float elu_df(float x) { return elu_df(x, 1.0f, 1.0f); }

// softplus, beta 1, threshold 20: x > 20 ? x : log1p(exp(x)); f' = x > 20 ? 1 : sigmoid(x).
constexpr float kSoftplusThreshold = 20.0f;
PACKRAT_INLINE float softplus_f(float x) {
  const float sp = (x > 0.0f ? x : 0.0f) + log1p_unit(fast_exp(-std::fabs(x)));
  return x > kSoftplusThreshold ? x : sp;
}
PACKRAT_INLINE float softplus_df(float x) { return x > kSoftplusThreshold ? 1.0f : logistic(x).s; }

// mish: x tanh(softplus(x)) (no threshold in PyTorch's mish). With w = e^x and q = w (w + 2):
// tanh(log(1 + w)) = q / (q + 2), and f' = tanh_sp + x sigmoid(x) (1 - tanh_sp^2)
// = q / (q + 2) + 4 x w (1 + w) / (q + 2)^2, free of cancellation.
PACKRAT_INLINE float mish_f(float x) {
  const float w = fast_exp(x < 20.0f ? x : 20.0f);
  const float q = w * (w + 2.0f);
  const float th = q / (q + 2.0f);
  return x * th;
}
PACKRAT_INLINE float mish_df(float x) {
  const float w = fast_exp(x < 20.0f ? x : 20.0f);
  const float q = w * (w + 2.0f);
  const float inv = 1.0f / (q + 2.0f);
  return std::fma(4.0f * x * w * (1.0f + w), inv * inv, q * inv);
}

// gelu_tanh (approximate='tanh', GPT-2's): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// With 0.5 (1 + tanh(u)) = sigmoid(2u) =: s (free of the cancellation 1 + tanh(u) has for x << 0):
// f = x s, f' = s + 2 x s (1 - s) u', u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluTanhCubic = 0.044715f;
// |x| is clamped to 20 inside u and u' (s is 0 or 1 in f32 from |x| = 10 on), so that x^3 never
// overflows and f' stays finite for huge inputs.
PACKRAT_INLINE float gelu_tanh_clamp(float x) {
  const float lo = x > -20.0f ? x : -20.0f;
  return lo < 20.0f ? lo : 20.0f;
}
PACKRAT_INLINE float gelu_tanh_2u(float x) {
  const float xc = gelu_tanh_clamp(x);
  return 2.0f * kSqrt2OverPi * std::fma(kGeluTanhCubic * xc * xc, xc, xc);
}
PACKRAT_INLINE float gelu_tanh_f(float x) { return x * logistic(gelu_tanh_2u(x)).s; }
PACKRAT_INLINE float gelu_tanh_df(float x) {
  const Logistic l = logistic(gelu_tanh_2u(x));
  const float xc = gelu_tanh_clamp(x);
  const float du = kSqrt2OverPi * std::fma(3.0f * kGeluTanhCubic, xc * xc, 1.0f);
  return std::fma(2.0f * xc * l.s * l.one_minus_s, du, l.s);
}

}  // namespace packrat::pwmath

namespace packrat {

// "gelu" for ActivationId::gelu: the name configs use; "?" for an id out of range.
constexpr std::string_view activation_name(ActivationId id) {
#define PACKRAT_ACTIVATION_NAME(name, derivative, even, step) #name,
  constexpr std::string_view kNames[kNumActivations] = {PACKRAT_ACTIVATIONS(PACKRAT_ACTIVATION_NAME)};
#undef PACKRAT_ACTIVATION_NAME
  const auto i = static_cast<unsigned>(id);
  return i < static_cast<unsigned>(kNumActivations) ? kNames[i] : "?";
}

// Activation<id>::f, ::df and, where PyTorch saves the output instead of the input (relu,
// sigmoid, tanh: kFromOutput true), ::df_from_output(y) = f'(x) computed from y = f(x) (the
// others have no such member: code that uses it tests kFromOutput with `if constexpr`). One type
// per activation, so that a loop or a kernel instantiated on it is the single-function loop it is.
template <ActivationId Id>
struct Activation;

#define PACKRAT_ACTIVATION_IS_from_input false
#define PACKRAT_ACTIVATION_IS_from_output true
#define PACKRAT_ACTIVATION_DF_Y_from_input(ID)
#define PACKRAT_ACTIVATION_DF_Y_from_output(ID) \
  PACKRAT_INLINE static float df_from_output(float y) { return pwmath::ID##_df_from_y(y); }
#define PACKRAT_ACTIVATION_TYPE(ID, DERIVATIVE, EVEN, STEP)                  \
  template <>                                                               \
  struct Activation<ActivationId::ID> {                                     \
    static constexpr bool kFromOutput = PACKRAT_ACTIVATION_IS_##DERIVATIVE; \
    PACKRAT_INLINE static float f(float x) { return pwmath::ID##_f(x); }    \
    PACKRAT_INLINE static float df(float x) { return pwmath::ID##_df(x); }  \
    PACKRAT_ACTIVATION_DF_Y_##DERIVATIVE(ID)                                \
  };
PACKRAT_ACTIVATIONS(PACKRAT_ACTIVATION_TYPE)
#undef PACKRAT_ACTIVATION_TYPE
#undef PACKRAT_ACTIVATION_IS_from_input
#undef PACKRAT_ACTIVATION_IS_from_output
#undef PACKRAT_ACTIVATION_DF_Y_from_input
#undef PACKRAT_ACTIVATION_DF_Y_from_output

// fn(Activation<id>{}) for a runtime id: the one switch over the ids that loop tables, kernel
// launchers and tests dispatch through. The caller has checked id < kNumActivations (an id out of
// range takes the last activation).
template <typename Fn>
decltype(auto) with_activation(ActivationId id, Fn&& fn) {
  switch (id) {
#define PACKRAT_ACTIVATION_CASE(ID, DERIVATIVE, EVEN, STEP) \
  case ActivationId::ID:                                    \
    return fn(Activation<ActivationId::ID>{});
    PACKRAT_ACTIVATIONS(PACKRAT_ACTIVATION_CASE)
#undef PACKRAT_ACTIVATION_CASE
  }
  return fn(Activation<static_cast<ActivationId>(kNumActivations - 1)>{});
}

// Whether f' of `id` can be computed from its output (Activation<id>::kFromOutput).
inline bool derivative_from_output_exists(ActivationId id) {
  return with_activation(id, [](auto a) { return decltype(a)::kFromOutput; });
}

}  // namespace packrat
