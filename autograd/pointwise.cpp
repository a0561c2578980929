// The built-in pointwise activations, PyTorch's definitions (torch.nn.functional, CPU kernels
// in aten/src/ATen/native/cpu/Activation.cpp and UnaryOpsKernel.cpp, backward formulas from
// tools/autograd/derivatives.yaml).
//
// Speed: the bulk loops run on every activation of every training step, so the scalar
// functions below are written branch-free (selects, fma, bit casts) with our own exp, expm1,
// log1p and erfc approximations (pointwise_math.h), so that GCC -O3 -march=native vectorises
// each loop as a whole instead of calling libm per element. Accuracy: a few ulp relative against
// double-precision libm, checked over dense grids in tests/autograd/activation_test.cpp.
#include "autograd/pointwise.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "autograd/pointwise_math.h"
#include "core/error.h"

namespace packrat {
namespace {

using namespace pwmath;

// ---------------------------------------------------------------------------------------------
// The activations: f and f' as scalar inline functions, used by both the scalar entry points
// and the bulk loops.

// relu: max(x, 0); PyTorch saves the result and passes grad where result > 0.
PACKRAT_INLINE float relu_f(float x) { return x > 0.0f ? x : 0.0f; }
PACKRAT_INLINE float relu_df(float x) { return x > 0.0f ? 1.0f : 0.0f; }

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
PACKRAT_INLINE float gelu_df(float x) {
  return std::fma(x * kInvSqrt2Pi, exp_neg_half_square(x), normal_cdf(x));
}

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
PACKRAT_INLINE float eluf(float x) { return elu_f(x, 1.0f, 1.0f); }
PACKRAT_INLINE float eludf(float x) { return elu_df(x, 1.0f, 1.0f); }

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

// ---------------------------------------------------------------------------------------------
// Bulk loops: one per function, each a single loop over inlined branch-free code.

#define PACKRAT_LOOP(NAME, FN)                                       \
  void NAME(const float* __restrict x, float* __restrict y, int64_t n) { \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] = FN(x[i]); \
  }

#define PACKRAT_POINTWISE(ID, F, DF)        \
  float ID##_scalar_f(float x) { return F(x); }   \
  float ID##_scalar_df(float x) { return DF(x); } \
  PACKRAT_LOOP(ID##_forward, F)               \
  PACKRAT_LOOP(ID##_derivative, DF)

PACKRAT_POINTWISE(relu, relu_f, relu_df)
PACKRAT_POINTWISE(leaky_relu, leaky_relu_f, leaky_relu_df)
PACKRAT_POINTWISE(relu6, relu6_f, relu6_df)
PACKRAT_POINTWISE(hardswish, hardswish_f, hardswish_df)
PACKRAT_POINTWISE(gelu, gelu_f, gelu_df)
PACKRAT_POINTWISE(silu, silu_f, silu_df)
PACKRAT_POINTWISE(sigmoid, sigmoid_f, sigmoid_df)
PACKRAT_POINTWISE(tanh, tanh_f, tanh_df)
PACKRAT_POINTWISE(selu, selu_f, selu_df)
PACKRAT_POINTWISE(softplus, softplus_f, softplus_df)
PACKRAT_POINTWISE(elu, eluf, eludf)
PACKRAT_POINTWISE(mish, mish_f, mish_df)
PACKRAT_POINTWISE(gelu_tanh, gelu_tanh_f, gelu_tanh_df)
PACKRAT_LOOP(relu_derivative_y, relu_df)  // y > 0 exactly where x > 0
PACKRAT_LOOP(sigmoid_derivative_y, sigmoid_df_from_y)
PACKRAT_LOOP(tanh_derivative_y, tanh_df_from_y)

#define PACKRAT_ENTRY(ID) #ID, ActivationId::ID, ID##_scalar_f, ID##_scalar_df, ID##_forward, ID##_derivative

const Pointwise kRelu{PACKRAT_ENTRY(relu), relu_derivative_y, false, true};
const Pointwise kLeakyRelu{PACKRAT_ENTRY(leaky_relu), nullptr, false, true};
const Pointwise kRelu6{PACKRAT_ENTRY(relu6), nullptr, false, true};
const Pointwise kHardswish{PACKRAT_ENTRY(hardswish), nullptr, false, false};
const Pointwise kGelu{PACKRAT_ENTRY(gelu), nullptr, false, false};
const Pointwise kSilu{PACKRAT_ENTRY(silu), nullptr, false, false};
const Pointwise kSigmoid{PACKRAT_ENTRY(sigmoid), sigmoid_derivative_y, true, false};
const Pointwise kTanh{PACKRAT_ENTRY(tanh), tanh_derivative_y, true, false};
const Pointwise kSelu{PACKRAT_ENTRY(selu), nullptr, false, false};
const Pointwise kSoftplus{PACKRAT_ENTRY(softplus), nullptr, false, false};
const Pointwise kElu{PACKRAT_ENTRY(elu), nullptr, false, false};
const Pointwise kMish{PACKRAT_ENTRY(mish), nullptr, false, false};
const Pointwise kGeluTanh{PACKRAT_ENTRY(gelu_tanh), nullptr, false, false};

const Pointwise* const kAll[] = {&kRelu, &kLeakyRelu, &kRelu6, &kHardswish, &kGelu,     &kSilu,
                                 &kSigmoid, &kTanh, &kSelu, &kSoftplus, &kElu, &kMish, &kGeluTanh};

const Pointwise* find(std::string_view name) {
  for (const Pointwise* p : kAll)
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace

const Pointwise& pointwise_by_name(std::string_view name) {
  if (const Pointwise* p = find(name)) return *p;
  std::string known;
  for (const Pointwise* p : kAll) known += (known.empty() ? "" : ", ") + std::string(p->name);
  fail("activation: unknown function '{}' (known: {})", name, known);
}

bool is_pointwise_name(std::string_view name) { return find(name) != nullptr; }

const Pointwise& pointwise_by_id(ActivationId id) {
  static_assert(sizeof(kAll) / sizeof(kAll[0]) == kNumActivations);
  const auto i = static_cast<size_t>(id);
  PACKRAT_CHECK(i < static_cast<size_t>(kNumActivations) && kAll[i]->id == id, "activation: unknown id {}", i);
  return *kAll[i];
}

}  // namespace packrat
