// cross_entropy: PyTorch goldens with and without label smoothing, ignore_index, gradient check,
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "quant/policy/rule_policy.h"
#include "tests/autograd/elementwise_golden.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(CrossEntropyOp, MatchesPyTorchWithAndWithoutLabelSmoothing) {
  auto g = packrat::testing::load_golden("cross_entropy.txt");
  for (auto [tag, ls] : {std::pair{"ls0", 0.0f}, std::pair{"ls1", 0.1f}}) {
    SCOPED_TRACE(tag);
    Tensor x = g.at("logits").f32().set_requires_grad(true);
    Tensor loss = ops::cross_entropy(x, g.at("targets").i64(), ls);
    EXPECT_EQ(loss.numel(), 1);
    EXPECT_NEAR(loss.item(), g.at(std::string("loss_") + tag).values[0], 1e-6);
    backward(loss, Tensor::full(loss.shape(), 1.5f));  // the golden's seed
    packrat::testing::expect_close(x.grad(), g.at(std::string("dx_") + tag), 1e-7, 1e-5, "dlogits");
  }
}

TEST(CrossEntropyOp, UniformLogitsGiveLogC) {
  Tensor t = Tensor::zeros({3}, DType::i64);
  EXPECT_NEAR(ops::cross_entropy(Tensor::zeros({3, 10}), t).item(), std::log(10.0), 1e-6);
  EXPECT_NEAR(ops::cross_entropy(Tensor::zeros({3, 10}), t, 0.3f).item(), std::log(10.0), 1e-6);
}

TEST(CrossEntropyOp, SavesExactProbabilitiesAndTargets) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor x = random_tensor({4, 6}, 1).set_requires_grad(true);
  Tensor t = Tensor::zeros({4}, DType::i64);
  Tensor loss = ops::cross_entropy(x, t);
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_EQ(rec[0].need, Need::Value);
  EXPECT_EQ(rec[0].numel, 24);
  EXPECT_EQ(rec[1].need, Need::Index);
  backward(loss);
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(CrossEntropyOpGrad, CentralDifferences) {
  Tensor t = Tensor::empty({3}, DType::i64);
  t.data<int64_t>()[0] = 4;
  t.data<int64_t>()[1] = 0;
  t.data<int64_t>()[2] = 2;
  Tensor x = random_tensor({3, 5}, 3, -2.0f, 2.0f).set_requires_grad(true);
  gradcheck([t](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], t, 0.2f); }, {x},
            {.eps = 1e-2, .atol = 1e-3, .rtol = 2e-2});
}

TEST(CrossEntropyOpErrors, BadTargetsNameOpAndLayer) {
  LayerScope layer("head");
  Tensor x = Tensor::zeros({2, 3});
  auto expect_error = [&](const Tensor& t, const std::string& part) {
    try {
      ops::cross_entropy(x, t);
      FAIL() << "expected an error containing " << part;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("cross_entropy head"), std::string::npos) << m;
      EXPECT_NE(m.find(part), std::string::npos) << m;
    }
  };
  expect_error(Tensor::zeros({2}, DType::i32), "i64");
  Tensor bad = Tensor::zeros({2}, DType::i64);
  bad.data<int64_t>()[1] = 3;
  expect_error(bad, "out of range");
  expect_error(Tensor::zeros({3}, DType::i64), "shape");
  EXPECT_THROW(ops::cross_entropy(x, Tensor::zeros({2}, DType::i64), 1.5f), Error);
}

// ignore_index as PyTorch: the loss and gradient of the samples not ignored, as if the others were
// not in the batch (the mean over the kept ones); the ignored rows' gradient is 0.
TEST(CrossEntropyOp, IgnoreIndexLeavesOutThoseSamples) {
  const std::vector<int64_t> tv{3, -100, 0, -100, 4};
  Tensor t = Tensor::empty({5}, DType::i64), kept_t = Tensor::empty({3}, DType::i64);
  for (int64_t i = 0; i < 5; ++i) t.data<int64_t>()[i] = tv[i];
  const int64_t kept_rows[] = {0, 2, 4};
  for (int64_t i = 0; i < 3; ++i) kept_t.data<int64_t>()[i] = tv[kept_rows[i]];
  const Tensor x0 = random_tensor({5, 6}, 7, -3.0f, 3.0f);
  Tensor kept = Tensor::empty({3, 6});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < 6; ++c) kept.data<float>()[i * 6 + c] = x0.data<float>()[kept_rows[i] * 6 + c];
  for (float ls : {0.0f, 0.1f}) {
    Tensor x = x0.clone().set_requires_grad(true), xk = kept.clone().set_requires_grad(true);
    Tensor loss = ops::cross_entropy(x, t, ls, -100);
    backward(loss);
    Tensor want = ops::cross_entropy(xk, kept_t, ls);
    backward(want);
    EXPECT_NEAR(loss.item(), want.item(), 1e-6) << ls;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t c = 0; c < 6; ++c) {
        const float g = x.grad().data<float>()[i * 6 + c];
        if (tv[i] == -100) {
          EXPECT_EQ(g, 0.0f) << i;
        } else {
          const int64_t k = i / 2;  // rows 0, 2, 4 -> 0, 1, 2
          EXPECT_EQ(g, xk.grad().data<float>()[k * 6 + c]) << i << " " << c;
        }
      }
  }
  // The gradient by central differences, with the ignored samples in the batch.
  Tensor x = random_tensor({5, 6}, 8, -2.0f, 2.0f).set_requires_grad(true);
  gradcheck([t](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], t, 0.2f, -100); }, {x},
            {.eps = 1e-2, .atol = 1e-3, .rtol = 2e-2});
}

TEST(CrossEntropyOp, EveryTargetIgnoredGivesZeroLossAndGradient) {
  Tensor x = random_tensor({3, 4}, 9).set_requires_grad(true);
  Tensor t = Tensor::full({3}, -100.0f).to(DType::i64);
  Tensor loss = ops::cross_entropy(x, t, 0.1f, -100);
  EXPECT_EQ(loss.item(), 0.0f);
  backward(loss);
  for (float g : x.grad().to_vector()) EXPECT_EQ(g, 0.0f);
  // Without ignore_index, -100 is out of range.
  EXPECT_THROW(ops::cross_entropy(x, t), Error);
}

TEST(CrossEntropyOp, IgnoredTargetsComeBackUnderEveryScheme) {
  // The targets are saved exactly whatever the scheme: the backward sees the ignored ones and
  // gives their rows a zero gradient, the same bits under every store.
  Tensor t = Tensor::zeros({4}, DType::i64);
  t.data<int64_t>()[1] = 5;
  t.data<int64_t>()[2] = -100;
  const Tensor x0 = random_tensor({4, 6}, 1);
  auto grad_under = [&](StorePolicy& policy) {
    PolicyScope scope(policy);
    Tensor x = x0.clone().set_requires_grad(true);
    Tensor loss = ops::cross_entropy(x, t, 0.0f, -100);
    for (const SavedRecord& r : policy.describe())
      if (r.need == Need::Index) {
        EXPECT_EQ(r.dtype, DType::i64);
      }
    backward(loss);
    return x.grad().to_vector();
  };
  Fp32Policy fp32;
  const std::vector<float> want = grad_under(fp32);
  for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(want[2 * 6 + c], 0.0f);
  for (const char* scheme : {"fewbit", "actnn", "mixed", "deterministic"}) {
    StorePolicySpec spec;
    spec.default_scheme.scheme = scheme;
    if (std::string(scheme) == "deterministic") spec.default_scheme.options = {{"bits", "2"}};
    RulePolicy policy(spec);
    EXPECT_EQ(grad_under(policy), want) << scheme;
  }
}
