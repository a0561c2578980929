// linear and matmul: gradient checks (2-d, batched, with and without bias), a direct-loop
// reference, blocked inputs, error messages.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/golden/dnnl/golden.h"
#include "tests/support/gradcheck.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {
Tensor param(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST(LinearOpGrad, WithBias) {
  gradcheck([](const std::vector<Tensor>& t) { return ops::linear(t[0], t[1], t[2]); },
            {param({3, 5}, 1), param({4, 5}, 2), param({4}, 3)});
}

TEST(LinearOpGrad, LeadingDimensionsNoBias) {
  gradcheck([](const std::vector<Tensor>& t) { return ops::linear(t[0], t[1], Tensor()); },
            {param({2, 3, 5}, 1), param({4, 5}, 2)});
}

TEST(LinearOpGrad, MatmulTwoD) {
  gradcheck([](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1]); }, {param({3, 4}, 1), param({4, 5}, 2)});
}

TEST(LinearOpGrad, MatmulBatched) {
  gradcheck([](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1]); },
            {param({2, 3, 3, 4}, 1), param({2, 3, 4, 2}, 2)});
}

TEST(LinearOp, MatchesDirectLoops) {
  Tensor x = random_tensor({3, 5}, 1), w = random_tensor({4, 5}, 2), b = random_tensor({4}, 3);
  const auto y = ops::linear(x, w, b).to_vector();
  const auto xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 4; ++o) {
      double s = bv[o];
      for (int k = 0; k < 5; ++k) s += xv[i * 5 + k] * wv[o * 5 + k];
      EXPECT_NEAR(y[i * 4 + o], s, 1e-5);
    }
  Tensor a = random_tensor({2, 3, 4}, 4), c = random_tensor({2, 4, 2}, 5);
  Tensor m = ops::matmul(a, c);
  EXPECT_EQ(m.shape(), (Shape{2, 3, 2}));
  const auto mv = m.to_vector(), av = a.to_vector(), cv = c.to_vector();
  for (int bb = 0; bb < 2; ++bb)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        double s = 0;
        for (int k = 0; k < 4; ++k) s += av[(bb * 3 + i) * 4 + k] * cv[(bb * 4 + k) * 2 + j];
        EXPECT_NEAR(mv[(bb * 3 + i) * 2 + j], s, 1e-5);
      }
}

TEST(LinearOp, BlockedInputGetsItsGradientInItsLayout) {
  // A (N, 16, 1, 1) blocked activation (after global pooling) fed to linear over its last dim.
  Tensor x = random_tensor({2, 16, 1, 3}, 1).to_layout(Layout::nChw16c).clone();
  x.set_requires_grad(true);
  Tensor w = param({4, 3}, 2);
  Tensor y = ops::linear(x, w, Tensor());
  backward(y, Tensor::full(y.shape(), 1.0f));
  EXPECT_EQ(x.grad().layout(), Layout::nChw16c);
  // dx[..., k] = sum_o w[o, k]
  const auto wv = w.to_vector(), gx = x.grad().to_vector();
  for (size_t i = 0; i < gx.size(); ++i) {
    const size_t k = i % 3;
    EXPECT_NEAR(gx[i], wv[k] + wv[3 + k] + wv[6 + k] + wv[9 + k], 1e-5);
  }
}

TEST(LinearOp, ErrorsNameTheOpTheLayerAndTheProblem) {
  LayerScope layer("fc");
  EXPECT_EQ(message_of([] { ops::linear(random_tensor({2, 512}, 1), random_tensor({10, 256}, 2), Tensor()); }),
            "linear fc: input has 512 features, weight expects 256");
  EXPECT_EQ(message_of([] { ops::linear(random_tensor({2, 4}, 1), random_tensor({10, 4}, 2), random_tensor({9}, 3)); }),
            "linear fc: bias has shape (9,), expected (10,)");
  EXPECT_EQ(message_of([] { ops::matmul(random_tensor({2, 3}, 1), random_tensor({4, 2}, 2)); }),
            "matmul fc: cannot multiply (2, 3) by (4, 2): inner dimensions 3 and 4 differ");
  EXPECT_EQ(message_of([] { ops::matmul(random_tensor({2, 2, 3}, 1), random_tensor({3, 3, 2}, 2)); }),
            "matmul fc: batch dimensions differ: (2, 2, 3) and (3, 3, 2)");
  EXPECT_NE(message_of([] { ops::linear(random_tensor({2, 4}, 1).to(DType::f64), random_tensor({3, 4}, 2), Tensor()); })
                .find("linear fc: input has dtype f64"),
            std::string::npos);
}

TEST(LinearOpGolden, MatchesPyTorchForwardAndGradients) {
  using namespace packrat::testing;
  const auto g = load_dnnl_golden("linear.bin");
  for (const std::string name : {"linear", "linear3d"}) {
    SCOPED_TRACE(name);
    Tensor x = golden_leaf(g, name + ".x"), w = golden_leaf(g, name + ".w");
    const bool has_bias = g.count(name + ".b") > 0;
    Tensor b = has_bias ? golden_leaf(g, name + ".b") : Tensor();
    Tensor y = ops::linear(x, w, b);
    expect_matches_golden(y, golden(g, name + ".y"), "y");
    backward(y, golden(g, name + ".g"));
    expect_matches_golden(x.grad(), golden(g, name + ".gx"), "dx");
    expect_matches_golden(w.grad(), golden(g, name + ".gw"), "dw");
    if (has_bias) expect_matches_golden(b.grad(), golden(g, name + ".gb"), "db");
  }
  for (const std::string name : {"matmul", "bmm"}) {
    SCOPED_TRACE(name);
    Tensor a = golden_leaf(g, name + ".a"), b = golden_leaf(g, name + ".b");
    Tensor y = ops::matmul(a, b);
    expect_matches_golden(y, golden(g, name + ".y"), "y");
    backward(y, golden(g, name + ".g"));
    expect_matches_golden(a.grad(), golden(g, name + ".ga"), "da");
    expect_matches_golden(b.grad(), golden(g, name + ".gb"), "db");
  }
}
