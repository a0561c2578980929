// cross_entropy: PyTorch goldens with and without label smoothing, gradient check, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
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
