// softmax over the last dimension.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/autograd/elementwise_golden.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(SoftmaxOp, MatchesPyTorchGolden) {
  auto g = packrat::testing::load_golden("softmax.txt");
  Tensor x = g.at("x").f32().set_requires_grad(true);
  Tensor y = ops::softmax(x);
  packrat::testing::expect_close(y, g.at("y"), 1e-7, 1e-6, "y");
  backward(y, g.at("gout").f32());
  packrat::testing::expect_close(x.grad(), g.at("dx"), 1e-7, 1e-5, "dx");
}

TEST(SoftmaxOp, RowsSumToOneAndLargeLogitsAreStable) {
  Tensor x = Tensor::from_vector({2, 3}, std::vector<float>{1000, 1001, 1002, -1000, -1000, -1000});
  const auto y = ops::softmax(x).to_vector();
  EXPECT_NEAR(y[0] + y[1] + y[2], 1.0, 1e-6);
  EXPECT_NEAR(y[2], 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(y[i], 1.0 / 3.0, 1e-7);
}

TEST(SoftmaxOp, SavesItsOutput) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor x = random_tensor({4, 5}, 1).set_requires_grad(true);
  Tensor y = ops::softmax(x);
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].need, Need::Value);
  EXPECT_EQ(y.storage()->allocation->tag(), MemTag::Saved);
  EXPECT_EQ(x.storage()->allocation->tag(), MemTag::Activation);
  clear_tape();
}

TEST(SoftmaxOpGrad, CentralDifferences) {
  Tensor x = random_tensor({2, 3, 6}, 4, -2.0f, 2.0f).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x});
}

TEST(SoftmaxOpErrors, WrongDtypeNamesTheLayer) {
  LayerScope layer("attn");
  EXPECT_THROW(ops::softmax(Tensor::zeros({2, 2}, DType::i64)), Error);
}
