// Stochastic depth (drop path, torchvision's StochasticDepth(mode="row")): whole samples kept or
// zeroed, survivors scaled by 1 / (1 - p), the per-sample mask saved exactly (Need::Mask) and the
// same under every compressing scheme, identity in eval, and the StochasticDepth layer's streams.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/ops/drop_path.h"
#include "autograd/tape.h"
#include "layers/stochastic_depth.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

// Whether each sample of y is x * scale (kept) or zero, all elements alike; returns the kept count.
int64_t check_whole_samples(const Tensor& x, const Tensor& y, float scale, std::vector<bool>* kept = nullptr) {
  const auto vx = x.to_vector(), vy = y.to_vector();
  const int64_t N = x.dim(0), per = x.numel() / N;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    const bool keep = vy[static_cast<size_t>(n * per)] != 0.0f;
    for (int64_t i = 0; i < per; ++i) {
      const size_t k = static_cast<size_t>(n * per + i);
      EXPECT_EQ(vy[k], keep ? vx[k] * scale : 0.0f) << "sample " << n << " element " << i;
    }
    if (kept) kept->push_back(keep);
    count += keep;
  }
  return count;
}

}  // namespace

TEST(DropPathOp, WholeSamplesAreKeptWithProbabilityOneMinusPAndScaled) {
  const int64_t N = 20000;
  for (float p : {0.1f, 0.5f}) {
    const Tensor x = random_tensor({N, 2, 1, 3}, 3, 0.5f, 1.5f);  // nonzero: a zero output means dropped
    const Tensor y = ops::drop_path(x, p, true, 11, 4);
    const int64_t kept = check_whole_samples(x, y, 1.0f / (1.0f - p));
    const double sigma = std::sqrt(p * (1.0 - p) / N);
    EXPECT_NEAR(static_cast<double>(kept) / N, 1.0 - p, 5 * sigma) << "p = " << p;
  }
}

// Sample n's decision is dropout's element n under the same (seed, stream): one definition of
// the Philox order for both, so the CUDA backend's dropout primitive serves drop path as well.
TEST(DropPathOp, SampleDecisionIsDropoutsElementDecision) {
  const int64_t N = 777;
  const Tensor x = random_tensor({N, 5}, 2, 0.5f, 1.5f);
  std::vector<bool> kept;
  check_whole_samples(x, ops::drop_path(x, 0.3f, true, 99, 12), 1.0f / 0.7f, &kept);
  const auto d = ops::dropout(Tensor::full({N}, 1.0f), 0.3f, true, 99, 12).to_vector();
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(kept[static_cast<size_t>(n)], d[static_cast<size_t>(n)] != 0.0f) << n;
}

TEST(DropPathOp, MaskIsSavedExactlyOneBytePerSampleAndBackwardUsesIt) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  const int64_t N = 64;
  Tensor x = random_tensor({N, 3, 4, 4}, 5, 0.5f, 1.5f).set_requires_grad(true);
  Tensor y = ops::drop_path(x, 0.4f, true, 7, 1);
  const auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].need, Need::Mask);
  EXPECT_EQ(rec[0].op, "drop_path");
  EXPECT_EQ(rec[0].bytes, N);  // one u8 per sample (PyTorch keeps its (N, 1, 1, 1) f32 noise: 4 N)
  const Tensor seed = random_tensor(x.shape(), 6);
  backward(y, seed);
  const auto vy = y.to_vector(), vs = seed.to_vector(), g = x.grad().to_vector();
  const int64_t per = x.numel() / N;
  const float scale = 1.0f / (1.0f - 0.4f);
  for (int64_t n = 0; n < N; ++n) {
    const bool keep = vy[static_cast<size_t>(n * per)] != 0.0f;
    for (int64_t i = 0; i < per; ++i) {
      const size_t k = static_cast<size_t>(n * per + i);
      EXPECT_EQ(g[k], keep ? vs[k] * scale : 0.0f) << n;
    }
  }
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(DropPathOp, IdentityInEvalOrWithPZeroAndZerosWithPOne) {
  const Tensor x = random_tensor({8, 4}, 1);
  EXPECT_TRUE(ops::drop_path(x, 0.5f, false, 1, 1).same_storage(x));
  EXPECT_TRUE(ops::drop_path(x, 0.0f, true, 1, 1).same_storage(x));
  for (float v : ops::drop_path(x, 1.0f, true, 1, 1).to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(ops::drop_path(x, 1.5f, true, 1, 1), Error);
}

TEST(DropPathOp, BlockedLayoutIsKeptWithTheSameValues) {
  const Tensor x = random_tensor({6, 16, 3, 3}, 3);
  const Tensor plain = ops::drop_path(x, 0.5f, true, 4, 4);
  const Tensor blocked = ops::drop_path(x.to_layout(Layout::nChw16c), 0.5f, true, 4, 4);
  EXPECT_EQ(blocked.layout(), Layout::nChw16c);
  EXPECT_EQ(blocked.to_plain().to_vector(), plain.to_vector());
}

TEST(DropPathOpGrad, CentralDifferences) {
  // The same (seed, stream) every call: the mask is a constant of the function checked.
  Tensor x = random_tensor({6, 2, 3, 3}, 8).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::drop_path(in[0], 0.5f, true, 21, 2); }, {x});
}

// Every compressing scheme keeps the mask exactly: gradients bit-identical to the FP32 store's.
TEST(DropPathOpStore, EverySchemeKeepsTheMaskExactly) {
  const Tensor x0 = random_tensor({32, 8, 2, 2}, 9);
  const Tensor seed = random_tensor(x0.shape(), 10);
  auto grad_under = [&](StorePolicy& policy) {
    PolicyScope scope(policy);
    policy.begin_step(0);
    Tensor x = x0.clone().set_requires_grad(true);
    Tensor y = ops::drop_path(x, 0.3f, true, 5, 6);
    int64_t masks = 0;
    for (const auto& r : policy.describe()) masks += r.op == "drop_path" && r.need == Need::Mask;
    EXPECT_EQ(masks, 1);
    backward(y, seed);
    return x.grad().to_vector();
  };
  Fp32Policy fp32;
  const auto want = grad_under(fp32);
  for (const char* scheme : {"fewbit", "actnn", "gact", "mixed", "deterministic"}) {
    StorePolicySpec spec;
    spec.default_scheme.scheme = scheme;
    if (std::string(scheme) == "deterministic") spec.default_scheme.options = {{"bits", "2"}};
    if (std::string(scheme) == "gact") spec.default_scheme.options = {{"avg_bits", "2"}};
    RulePolicy policy(spec);
    const auto got = grad_under(policy);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << scheme;
  }
}

TEST(StochasticDepthLayer, EvalIsIdentityAndEachTrainingCallDrawsAFreshMask) {
  StochasticDepth sd(0.5f);
  const Tensor x = random_tensor({256, 3}, 4, 0.5f, 1.5f);
  const auto a = sd(x).to_vector(), b = sd(x).to_vector();
  EXPECT_NE(a, b) << "two training calls drew the same mask";
  EXPECT_EQ(sd.calls(), 2u);
  sd.eval();
  EXPECT_TRUE(sd(x).same_storage(x));
  // Another module (another index) draws another mask on its first call.
  StochasticDepth other(0.5f), again(0.5f);
  EXPECT_NE(other(x).to_vector(), again(x).to_vector());
  EXPECT_THROW(StochasticDepth(-0.1f), Error);
}
