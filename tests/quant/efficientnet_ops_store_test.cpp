// What EfficientNet saves, under every compressing store: SiLU, sigmoid and hardswish derivatives
// through the few-bit store (1-4 bits, the table's error, packed bytes) and the per-group / mixed /
// deterministic stores (f' of the dequantized input, a fraction of FP32's bytes), and
// squeeze-excitation's broadcasting multiply (N, C, 1, 1) x (N, C, H, W) with both operands
// compressed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "quant/bits/bitpack.h"
#include "quant/fewbit/fewbit_table.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::random_tensor;

constexpr const char* kActivations[] = {"silu", "sigmoid", "hardswish"};

StorePolicySpec fp32_default_with(const std::string& op, const std::string& scheme,
                                  std::map<std::string, std::string> options) {
  StorePolicySpec spec;
  StoreRule rule;
  rule.ops = {op};
  rule.spec.scheme = scheme;
  rule.spec.options = std::move(options);
  spec.rules.push_back(rule);
  return spec;
}

struct ActivationRun {
  std::vector<float> grad;
  std::vector<SavedRecord> saved;  // after the forward
};

// dL/dx of sum(fn(x) * seed) under `policy`, and what the policy held after the forward.
ActivationRun activation_run(StorePolicy& policy, const Tensor& x0, const char* fn, const Tensor& seed) {
  PolicyScope scope(policy);
  policy.begin_step(0);
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor y = ops::activation(x, fn);
  ActivationRun r;
  r.saved = policy.describe();
  backward(y, seed);
  r.grad = x.grad().to_vector();
  return r;
}

TEST(EfficientNetActivationStore, FewbitKeepsTheTableIndexAtEveryWidth) {
  const Tensor x = random_tensor({4, 8, 9, 7}, 1, -6.0f, 6.0f);  // 2016 elements
  const Tensor seed = random_tensor(x.shape(), 2);
  const auto xs = x.to_vector(), s = seed.to_vector();
  for (const char* fn : kActivations) {
    const Pointwise& f = pointwise_by_name(fn);
    for (int bits = 1; bits <= 4; ++bits) {
      RulePolicy policy(fp32_default_with(fn, "fewbit", {{"bits", std::to_string(bits)}}));
      const ActivationRun r = activation_run(policy, x, fn, seed);
      ASSERT_EQ(r.saved.size(), 1u) << fn;
      EXPECT_EQ(r.saved[0].scheme, "fewbit") << fn;
      EXPECT_EQ(r.saved[0].need, Need::Derivative) << fn;
      EXPECT_EQ(r.saved[0].bits, bits) << fn;
      EXPECT_EQ(r.saved[0].bytes, packed_bytes(x.numel(), bits)) << fn << " " << bits;
      // grad = seed * q(x), q the table's piecewise-constant f': within its sup error of f'.
      const FewbitTable& t = fewbit_table(fn, bits);
      double max_err = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double exact = s[i] * f.df(xs[i]);
        EXPECT_LE(std::abs(r.grad[i] - exact), t.max_abs_error * std::abs(s[i]) + 1e-5) << fn << " " << bits << " x=" << xs[i];
        max_err = std::max(max_err, std::abs(r.grad[i] - exact));
      }
      EXPECT_GT(max_err, 0.0) << fn << " " << bits << ": the few-bit path must approximate";
    }
  }
}

TEST(EfficientNetActivationStore, GroupMixedAndDeterministicStoresKeepAQuantizedInput) {
  const Tensor x = random_tensor({4, 8, 16, 16}, 3, -5.0f, 5.0f);
  const Tensor seed = random_tensor(x.shape(), 4);
  const auto s = seed.to_vector(), xs = x.to_vector();
  struct Scheme {
    const char* name;
    std::map<std::string, std::string> options;
    double max_fraction;  // of FP32's bytes
    double tol;           // |grad - exact| / |seed|
  };
  const Scheme schemes[] = {{"actnn", {{"bits", "8"}}, 0.30, 0.03},
                            {"actnn", {{"bits", "2"}}, 0.10, 1.2},
                            {"mixed", {{"preset", "2/4@0.5"}}, 0.15, 1.2},
                            {"mixed", {{"base_bits", "8"}, {"mix_bits", "8"}}, 0.30, 0.03},
                            {"deterministic", {{"bits", "8"}}, 0.30, 0.03}};
  for (const char* fn : kActivations) {
    Fp32Policy fp32;
    const ActivationRun exact = activation_run(fp32, x, fn, seed);
    ASSERT_EQ(exact.saved.size(), 1u);
    for (const Scheme& sc : schemes) {
      RulePolicy policy(fp32_default_with(fn, sc.name, sc.options));
      const ActivationRun r = activation_run(policy, x, fn, seed);
      ASSERT_EQ(r.saved.size(), 1u) << fn << " " << sc.name;
      EXPECT_EQ(r.saved[0].scheme, sc.name) << fn;
      EXPECT_EQ(r.saved[0].fp32_bytes, exact.saved[0].bytes) << fn;
      EXPECT_LE(r.saved[0].bytes, sc.max_fraction * exact.saved[0].bytes) << fn << " " << sc.name;
      double diff = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        // hardswish' jumps by 0.5 at +-3: an input quantized across the jump takes the other side.
        const bool at_jump = std::string(fn) == "hardswish" && std::abs(std::abs(xs[i]) - 3.0f) < 0.1f;
        const double tol = at_jump ? sc.tol + 0.5 : sc.tol;
        EXPECT_LE(std::abs(r.grad[i] - exact.grad[i]), tol * std::abs(s[i]) + 1e-5) << fn << " " << sc.name << " " << i;
        diff += std::abs(r.grad[i] - exact.grad[i]);
      }
      EXPECT_GT(diff, 0.0) << fn << " " << sc.name << ": quantization must change the gradient somewhat";
    }
  }
}

// Squeeze-excitation's scale * x: both operands saved (each needed for the other's gradient),
// compressed by the per-group store, gradients close to FP32's and of the right shapes.
TEST(EfficientNetActivationStore, SqueezeExcitationMultiplySavesBothOperandsCompressed) {
  const Tensor s0 = random_tensor({4, 32, 1, 1}, 5, 0.0f, 1.0f), x0 = random_tensor({4, 32, 8, 8}, 6);
  const Tensor seed = random_tensor(x0.shape(), 7);
  auto run = [&](StorePolicy& policy, std::vector<SavedRecord>& saved, std::vector<float>& gs, std::vector<float>& gx) {
    PolicyScope scope(policy);
    policy.begin_step(0);
    Tensor s = s0.clone().set_requires_grad(true), x = x0.clone().set_requires_grad(true);
    Tensor y = ops::mul(s, x);
    EXPECT_EQ(y.shape(), x0.shape());
    saved = policy.describe();
    backward(y, seed);
    EXPECT_EQ(s.grad().shape(), s0.shape());
    gs = s.grad().to_vector();
    gx = x.grad().to_vector();
  };
  Fp32Policy fp32;
  std::vector<SavedRecord> saved32, saved8;
  std::vector<float> gs32, gx32, gs8, gx8;
  run(fp32, saved32, gs32, gx32);
  ASSERT_EQ(saved32.size(), 2u);
  EXPECT_EQ(saved32[0].bytes + saved32[1].bytes, 4 * (4 * 32 + 4 * 32 * 64));
  StorePolicySpec spec;
  spec.default_scheme.scheme = "actnn";
  spec.default_scheme.options = {{"bits", "8"}, {"group_size", "32"}};
  RulePolicy policy(spec);
  run(policy, saved8, gs8, gx8);
  ASSERT_EQ(saved8.size(), 2u);
  for (const auto& r : saved8) {
    EXPECT_EQ(r.scheme, "actnn");
    EXPECT_EQ(r.op, "mul");
    EXPECT_LT(r.bytes, r.fp32_bytes / 2);
  }
  // dL/ds sums 64 products dy x per channel: the stochastic rounding of x (groups of 32 values in
  // [-1, 1]: a step of at most 2/255, a bf16 step rounded up; an error of variance at most step^2 / 4
  // a value, unbiased) averages out to within 5 standard deviations of that sum's, sqrt(sum dy^2)
  // step / 2. (A fixed 0.02 + 2% held for one draw in ten of the rounding noise.)
  const std::vector<float> dy = seed.to_vector();
  const double step = 2.0 / 255 * 1.01;
  for (size_t c = 0; c < gs32.size(); ++c) {
    double sum_sq = 0;
    for (size_t i = 64 * c; i < 64 * c + 64; ++i) sum_sq += static_cast<double>(dy[i]) * dy[i];
    EXPECT_NEAR(gs8[c], gs32[c], 5 * std::sqrt(sum_sq) * step / 2) << c;
  }
  for (size_t i = 0; i < gx32.size(); ++i) EXPECT_NEAR(gx8[i], gx32[i], 0.01) << i;
}

}  // namespace
}  // namespace packrat
