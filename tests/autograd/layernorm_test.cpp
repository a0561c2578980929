// layernorm over the last dimension.
#include <gtest/gtest.h>

#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/autograd/elementwise_golden.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(LayerNormOp, MatchesPyTorchGolden) {
  auto g = packrat::testing::load_golden("layernorm.txt");
  Tensor x = g.at("x").f32().set_requires_grad(true);
  Tensor w = g.at("w").f32().set_requires_grad(true);
  Tensor b = g.at("b").f32().set_requires_grad(true);
  Tensor y = ops::layernorm(x, w, b);
  packrat::testing::expect_close(y, g.at("y"), 1e-6, 1e-5, "y");
  backward(y, g.at("gout").f32());
  packrat::testing::expect_close(x.grad(), g.at("dx"), 1e-6, 1e-5, "dx");
  packrat::testing::expect_close(w.grad(), g.at("dw"), 1e-6, 1e-5, "dw");
  packrat::testing::expect_close(b.grad(), g.at("db"), 1e-6, 1e-5, "db");
}

TEST(LayerNormOp, SavesInputAndExactStatistics) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor x = random_tensor({3, 8}, 1).set_requires_grad(true);
  Tensor y = ops::layernorm(x, Tensor(), Tensor());
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 3u);  // input, mean, rstd
  EXPECT_EQ(rec[0].numel, 24);
  EXPECT_EQ(rec[1].numel, 3);
  EXPECT_EQ(rec[2].numel, 3);
  backward(y, Tensor::full(y.shape(), 1.0f));
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(LayerNormOpGrad, CentralDifferencesWithAndWithoutAffine) {
  Tensor x = random_tensor({2, 3, 5}, 2, -2.0f, 2.0f).set_requires_grad(true);
  Tensor w = random_tensor({5}, 3, 0.5f, 1.5f).set_requires_grad(true);
  Tensor b = random_tensor({5}, 4).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::layernorm(in[0], in[1], in[2]); }, {x, w, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::layernorm(in[0], Tensor(), Tensor()); }, {x});
}

TEST(LayerNormOpErrors, WrongWeightShapeNamesOpAndLayer) {
  LayerScope layer("ln1");
  try {
    ops::layernorm(Tensor::zeros({2, 4}), Tensor::zeros({3}), Tensor());
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layernorm ln1"), std::string::npos) << m;
    EXPECT_NE(m.find("weight"), std::string::npos) << m;
  }
}
