// Activations: accuracy of the vectorised f and f' against double-precision libm over dense grids,
// PyTorch's conventions (goldens), gradient checks of the op, layouts, what the FP32 store keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "tests/autograd/elementwise_golden.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

const char* const kAllNames[] = {"relu", "leaky_relu", "relu6", "hardswish", "gelu", "silu",
                                 "sigmoid", "tanh", "selu", "softplus", "elu", "mish", "gelu_tanh"};

constexpr double kUlp = 1.0 / 8388608.0;  // 2^-23: one ulp of f32 relative to [1, 2)

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
// sigmoid and 1 - sigmoid without cancellation.
double sig(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
double sigc(double x) { return sig(-x); }
constexpr double kSeluA = 1.6732632423543772848170429916717, kSeluS = 1.0507009873554804934193349852946;

// Reference f, f' and the magnitude scale of f' (sum of |terms|: relative error of a sum that
// crosses zero is measured against it).
struct Reference {
  const char* name;
  double lo, hi;  // grid
  std::function<double(double)> f, df, df_scale;
  double f_ulps, df_ulps;  // bounds
};

std::vector<Reference> references() {
  auto abs_df = [](std::function<double(double)> df) { return [df](double x) { return std::abs(df(x)); }; };
  std::vector<Reference> r;
  r.push_back({"gelu", -13, 13, [](double x) { return x * Phi(x); }, [](double x) { return Phi(x) + x * phi(x); },
               [](double x) { return Phi(x) + std::abs(x) * phi(x); }, 5, 5});
  {
    // 0.5 (1 + tanh(u)) = sigmoid(2u): no cancellation for x << 0, even in double.
    constexpr double c = 0.7978845608028654, a = 0.044715;  // sqrt(2/pi), PyTorch's cubic term
    auto s = [=](double x) { return sig(2 * c * (x + a * x * x * x)); };
    auto du = [=](double x) { return c * (1 + 3 * a * x * x); };
    r.push_back({"gelu_tanh", -13, 13, [=](double x) { return x * s(x); },
                 [=](double x) { return s(x) + 2 * x * s(x) * (1 - s(x)) * du(x); },
                 [=](double x) { return s(x) + std::abs(2 * x * s(x) * (1 - s(x)) * du(x)); },
                 // exp(2u) amplifies the f32 rounding of u by |2u| (up to ~90 before it flushes),
                 // as in PyTorch's f32 kernel: the bound follows the conditioning.
                 128, 128});
  }
  auto silu_df = [](double x) { return sig(x) * (1 + x * sigc(x)); };
  r.push_back({"silu", -90, 90, [](double x) { return x * sig(x); }, silu_df,
               [](double x) { return sig(x) * (1 + std::abs(x) * sigc(x)); }, 4, 4});
  auto sig_df = [](double x) { return sig(x) * sigc(x); };
  r.push_back({"sigmoid", -90, 90, sig, sig_df, abs_df(sig_df), 4, 4});
  auto tanh_df = [](double x) {
    const double e = std::exp(-2 * std::abs(x));
    return 4 * e / ((1 + e) * (1 + e));
  };
  r.push_back({"tanh", -45, 45, [](double x) { return std::tanh(x); }, tanh_df, abs_df(tanh_df), 4, 4});
  auto selu_df = [](double x) { return x > 0 ? kSeluS : kSeluS * kSeluA * std::exp(x); };
  r.push_back({"selu", -90, 90, [](double x) { return x > 0 ? kSeluS * x : kSeluS * kSeluA * std::expm1(x); }, selu_df,
               abs_df(selu_df), 4, 4});
  auto elu_df = [](double x) { return x > 0 ? 1.0 : std::exp(x); };
  r.push_back({"elu", -90, 90, [](double x) { return x > 0 ? x : std::expm1(x); }, elu_df, abs_df(elu_df), 4, 4});
  auto sp_df = [](double x) { return x > 20 ? 1.0 : sig(x); };
  r.push_back({"softplus", -90, 90,
               [](double x) { return x > 20 ? x : std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }, sp_df,
               abs_df(sp_df), 4, 4});
  auto mish_t = [](double x) { return std::tanh(std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)))); };
  r.push_back({"mish", -90, 90, [mish_t](double x) { return x * mish_t(x); },
               [mish_t](double x) {
                 const double t = mish_t(x);
                 return t + x * sig(x) * (1 - t * t);
               },
               [mish_t](double x) {
                 const double t = mish_t(x);
                 return std::abs(t) + std::abs(x * sig(x) * (1 - t * t));
               },
               4, 4});
  return r;
}

// Nudges values away from the kinks of the piecewise functions (finite differences straddle them).
Tensor away_from_kinks(Tensor t) {
  for (float& v : t.span<float>())
    for (float k : {0.0f, 6.0f, -3.0f, 3.0f})
      if (std::abs(v - k) < 0.05f) v = k + (v < k ? -0.05f : 0.05f);
  return t;
}

}  // namespace

TEST(ActivationOpAccuracy, VectorisedLoopsMatchDoubleLibmWithinAFewUlps) {
  constexpr int kN = 400001;
  for (const Reference& ref : references()) {
    const Pointwise& fn = pointwise_by_name(ref.name);
    std::vector<float> x(kN), y(kN), d(kN);
    for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(ref.lo + (ref.hi - ref.lo) * i / (kN - 1.0));
    fn.forward(x.data(), y.data(), kN);
    fn.derivative(x.data(), d.data(), kN);
    double worst_f = 0, worst_df = 0, at_f = 0, at_df = 0;
    for (int i = 0; i < kN; ++i) {
      const double X = x[i], rf = ref.f(X);
      if (std::abs(rf) > 1e-35) {  // relative error (results below FLT_MIN may flush to 0)
        const double e = std::abs(y[i] - rf) / std::abs(rf);
        if (e > worst_f) worst_f = e, at_f = X;
      } else {
        EXPECT_LE(std::abs(y[i]), 1e-35) << ref.name << " at " << X;
      }
      const double s = ref.df_scale(X);
      if (s > 1e-35) {
        const double e = std::abs(d[i] - ref.df(X)) / s;
        if (e > worst_df) worst_df = e, at_df = X;
      }
    }
    EXPECT_LE(worst_f, ref.f_ulps * kUlp) << ref.name << " f: worst relative error " << worst_f / kUlp
                                          << " ulp at x = " << at_f;
    EXPECT_LE(worst_df, ref.df_ulps * kUlp) << ref.name << " f': worst relative error " << worst_df / kUlp
                                            << " ulp at x = " << at_df;
  }
}

TEST(ActivationOpAccuracy, ScalarEntryPointsEqualTheBulkLoops) {
  for (const char* name : kAllNames) {
    const Pointwise& fn = pointwise_by_name(name);
    std::vector<float> x(997), y(997), d(997);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -30.0f + 60.0f * static_cast<float>(i) / 996.0f;
    fn.forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    fn.derivative(x.data(), d.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(fn.f(x[i]), y[i]) << name << " at " << x[i];
      EXPECT_EQ(fn.df(x[i]), d[i]) << name << " at " << x[i];
    }
  }
}

TEST(ActivationOpAccuracy, ExtremeInputsGiveTheLimitsNotNaN) {
  for (const char* name : kAllNames) {
    const Pointwise& fn = pointwise_by_name(name);
    for (float x : {-1e30f, -1000.0f, -100.0f, 100.0f, 1000.0f, 1e30f}) {
      EXPECT_FALSE(std::isnan(fn.f(x))) << name << " f(" << x << ")";
      EXPECT_FALSE(std::isnan(fn.df(x))) << name << " f'(" << x << ")";
    }
  }
  EXPECT_EQ(pointwise_by_name("sigmoid").f(-1000.0f), 0.0f);
  EXPECT_EQ(pointwise_by_name("sigmoid").f(1000.0f), 1.0f);
  EXPECT_EQ(pointwise_by_name("tanh").f(-1000.0f), -1.0f);
  EXPECT_EQ(pointwise_by_name("gelu").f(1000.0f), 1000.0f);
  EXPECT_EQ(pointwise_by_name("gelu").df(1000.0f), 1.0f);
  EXPECT_EQ(pointwise_by_name("softplus").f(1000.0f), 1000.0f);
  EXPECT_EQ(pointwise_by_name("mish").f(1000.0f), 1000.0f);
  EXPECT_FLOAT_EQ(pointwise_by_name("elu").f(-1000.0f), -1.0f);
  EXPECT_TRUE(std::isnan(pointwise_by_name("gelu").f(NAN)));
  EXPECT_TRUE(std::isnan(pointwise_by_name("sigmoid").f(NAN)));
}

TEST(ActivationOpTable, FlagsFollowWhatPyTorchSaves) {
  for (const char* name : kAllNames) {
    const Pointwise& fn = pointwise_by_name(name);
    EXPECT_EQ(fn.name, name);
    EXPECT_TRUE(is_pointwise_name(name));
    const std::string n = name;
    EXPECT_EQ(fn.derivative_from_output != nullptr, n == "relu" || n == "sigmoid" || n == "tanh") << n;
    EXPECT_EQ(fn.derivative_is_step, n == "relu" || n == "leaky_relu" || n == "relu6") << n;
    EXPECT_EQ(fn.even_derivative, n == "sigmoid" || n == "tanh") << n;
  }
  EXPECT_FALSE(is_pointwise_name("swish"));
  try {
    pointwise_by_name("swish");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown function 'swish'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gelu"), std::string::npos) << e.what();  // lists the known ones
  }
}

TEST(ActivationOpTable, DerivativeFromOutputMatchesDerivativeFromInput) {
  for (const char* name : {"relu", "sigmoid", "tanh"}) {
    const Pointwise& fn = pointwise_by_name(name);
    std::vector<float> x(801), y(801), d(801), dy(801);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -8.0f + 16.0f * static_cast<float>(i) / 800.0f;
    fn.forward(x.data(), y.data(), 801);
    fn.derivative(x.data(), d.data(), 801);
    fn.derivative_from_output(y.data(), dy.data(), 801);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dy[i], d[i], 2e-6 + 1e-5 * d[i]) << name << " at " << x[i];
  }
}

TEST(ActivationOpTable, StepDerivativesTakeFewValuesAndHardswishIsLinearInTheMiddle) {
  for (const char* name : {"relu", "leaky_relu", "relu6"}) {
    const Pointwise& fn = pointwise_by_name(name);
    for (float x = -10.0f; x <= 10.0f; x += 0.01f) {
      const float d = fn.df(x);
      EXPECT_TRUE(d == 0.0f || d == 1.0f || d == 0.01f) << name << " f'(" << x << ") = " << d;
    }
  }
  const Pointwise& hs = pointwise_by_name("hardswish");
  EXPECT_FLOAT_EQ(hs.df(-1.5f), 0.0f);
  EXPECT_FLOAT_EQ(hs.df(1.5f), 1.0f);
  EXPECT_FLOAT_EQ(hs.df(-4.0f), 0.0f);
  EXPECT_FLOAT_EQ(hs.df(4.0f), 1.0f);
  EXPECT_FLOAT_EQ(hs.df(0.0f), 0.5f);
  EXPECT_FLOAT_EQ(hs.df(-3.0f), -0.5f);  // PyTorch 1.13: x/3 + 1/2 on [-3, 3), 1 from 3 on
  EXPECT_FLOAT_EQ(hs.df(3.0f), 1.0f);
}

TEST(ActivationOpGrad, CentralDifferencesForEveryActivation) {
  for (const char* name : kAllNames) {
    SCOPED_TRACE(name);
    Tensor x = away_from_kinks(random_tensor({2, 3, 5}, 11, -4.0f, 4.0f));
    x.set_requires_grad(true);
    gradcheck([&](const std::vector<Tensor>& in) { return ops::activation(in[0], name); }, {x});
  }
}

TEST(ActivationOpGolden, ValuesAndGradientsMatchPyTorch) {
  auto g = packrat::testing::load_golden("activations.txt");
  for (const char* name : kAllNames) {
    SCOPED_TRACE(name);
    Tensor x = g.at("x").f32();
    {
      NoGradScope ng;
      packrat::testing::expect_close(ops::activation(x, name), g.at(std::string("y_") + name), 1e-6, 2e-6, "y");
    }
    x.set_requires_grad(true);
    Tensor y = ops::activation(x, name);
    packrat::testing::expect_close(y, g.at(std::string("y_") + name), 1e-6, 2e-6, "y with grad");
    backward(y, g.at("gout").f32());
    packrat::testing::expect_close(x.grad(), g.at(std::string("dx_") + name), 1e-6, 2e-6, "dx");
  }
}

TEST(ActivationOpStore, Fp32StoreKeepsTheOutputForReluSigmoidTanhAndTheInputOtherwise) {
  for (const char* name : kAllNames) {
    SCOPED_TRACE(name);
    Fp32Policy policy;
    PolicyScope scope(policy);
    Tensor x = random_tensor({4, 8}, 3);
    x.set_requires_grad(true);
    Tensor y = ops::activation(x, name);
    auto records = policy.describe();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].need, Need::Derivative);
    EXPECT_EQ(records[0].op, name);
    EXPECT_EQ(records[0].bytes, 4 * 32);
    const bool from_output = pointwise_by_name(name).derivative_from_output != nullptr;
    EXPECT_EQ(y.storage()->allocation->tag(), from_output ? MemTag::Saved : MemTag::Activation);
    EXPECT_EQ(x.storage()->allocation->tag(), from_output ? MemTag::Activation : MemTag::Saved);
    backward(y, Tensor::full(y.shape(), 1.0f));
    EXPECT_EQ(policy.describe().size(), 0u);
  }
}

TEST(ActivationOpLayout, BlockedInputKeepsItsLayoutAndGetsTheSameGradient) {
  Tensor plain = random_tensor({2, 16, 3, 2}, 9, -3.0f, 3.0f);
  Tensor seed = random_tensor({2, 16, 3, 2}, 10);
  Tensor blocked = plain.to_layout(Layout::nChw16c);
  plain.set_requires_grad(true);
  blocked.set_requires_grad(true);
  Tensor yp = ops::gelu(plain);
  backward(yp, seed);
  Tensor yb = ops::gelu(blocked);  // one forward per backward: backward consumes the whole tape
  EXPECT_EQ(yb.layout(), Layout::nChw16c);
  EXPECT_EQ(yp.to_vector(), yb.to_vector());
  backward(yb, seed.to_layout(Layout::nChw16c));
  EXPECT_EQ(blocked.grad().layout(), Layout::nChw16c);
  EXPECT_EQ(plain.grad().to_vector(), blocked.grad().to_vector());
}

TEST(ActivationOpErrors, WrongDtypeNamesTheFunctionAndLayer) {
  LayerScope layer("block1.act");
  Tensor x = Tensor::zeros({3}, DType::i64);
  try {
    ops::activation(x, "silu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("silu block1.act"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::activation(Tensor::zeros({3}), "nope"), Error);
}

TEST(ActivationOp, WithoutGradNothingIsRecordedOrSaved) {
  Tensor x = random_tensor({5}, 1);
  x.set_requires_grad(true);
  NoGradScope ng;
  const size_t before = tape_size();
  Tensor y = ops::relu(x);
  EXPECT_EQ(tape_size(), before);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.storage()->allocation->tag(), MemTag::Activation);
}
