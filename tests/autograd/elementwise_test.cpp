// add, mul, scale: values, gradient checks, layouts, errors.
#include <gtest/gtest.h>

#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(ElementwiseOp, ValuesAreElementwise) {
  Tensor a = Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor b = Tensor::from_vector({2, 2}, std::vector<float>{10, 20, 30, 40});
  EXPECT_EQ(ops::add(a, b).to_vector(), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(ops::mul(a, b).to_vector(), (std::vector<float>{10, 40, 90, 160}));
  EXPECT_EQ(ops::scale(a, -0.5f).to_vector(), (std::vector<float>{-0.5f, -1, -1.5f, -2}));
}

TEST(ElementwiseOpGrad, CentralDifferencesForAddMulScale) {
  Tensor a = random_tensor({3, 4}, 1).set_requires_grad(true);
  Tensor b = random_tensor({3, 4}, 2).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::scale(in[0], 2.5f); }, {a});
  // A tensor used twice: d(a*a)/da = 2a, d(a+a)/da = 2.
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); }, {a});
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(ops::mul(in[0], in[1]), in[0]); }, {a, b});
}

TEST(ElementwiseOpGrad, BroadcastingOperandsGetGradientsSummedToTheirShape) {
  // Squeeze-and-excitation's gate: (N, C, 1, 1) * (N, C, H, W); a bias row; both stretched.
  Tensor gate = random_tensor({2, 3, 1, 1}, 1).set_requires_grad(true);
  Tensor x = random_tensor({2, 3, 4, 5}, 2).set_requires_grad(true);
  Tensor row = random_tensor({5}, 3).set_requires_grad(true);
  Tensor col = random_tensor({4, 1}, 4).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {gate, x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[1], in[0]); }, {gate, x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {x, row});
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {col, row});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {col, row});
  Tensor y = ops::mul(gate, x);
  EXPECT_EQ(y.shape(), Shape({2, 3, 4, 5}));
  const std::vector<float> g = gate.to_vector(), xv = x.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i], g[i / 20] * xv[i]);
  EXPECT_EQ(ops::add(col, row).shape(), Shape({4, 5}));
}

TEST(ElementwiseOpGrad, MulSavesOnlyTheOperandTheOtherGradientNeeds) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor a = random_tensor({8}, 1).set_requires_grad(true);
  Tensor b = random_tensor({8}, 2);  // a constant: only d/da = g * b is needed
  Tensor y = ops::mul(a, b);
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].op, "mul");
  EXPECT_TRUE(b.storage()->allocation->tag() == MemTag::Saved);
  EXPECT_TRUE(a.storage()->allocation->tag() == MemTag::Activation);
  backward(y, Tensor::full({8}, 1.0f));
  EXPECT_EQ(a.grad().to_vector(), b.to_vector());
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(ElementwiseOpLayout, OutputKeepsTheFirstLayoutAndGradientsTheirOwn) {
  Tensor ap = random_tensor({1, 16, 2, 3}, 4);
  Tensor bp = random_tensor({1, 16, 2, 3}, 5);
  Tensor ab = ap.to_layout(Layout::nChw16c).set_requires_grad(true);
  Tensor b = bp.clone().set_requires_grad(true);  // plain
  Tensor s = ops::add(ab, b);
  EXPECT_EQ(s.layout(), Layout::nChw16c);
  Tensor m = ops::mul(s, b);
  EXPECT_EQ(m.layout(), Layout::nChw16c);
  std::vector<float> va = ap.to_vector(), vb = bp.to_vector(), vm = m.to_vector();
  for (size_t i = 0; i < vm.size(); ++i) EXPECT_FLOAT_EQ(vm[i], (va[i] + vb[i]) * vb[i]);
  backward(m, Tensor::full(m.shape(), 1.0f).to_layout(Layout::nChw16c));
  EXPECT_EQ(ab.grad().layout(), Layout::nChw16c);
  EXPECT_EQ(b.grad().layout(), Layout::Plain);
  std::vector<float> ga = ab.grad().to_vector(), gb = b.grad().to_vector();
  for (size_t i = 0; i < ga.size(); ++i) {
    EXPECT_FLOAT_EQ(ga[i], vb[i]);                  // d/da (a+b)b = b
    EXPECT_FLOAT_EQ(gb[i], va[i] + 2.0f * vb[i]);   // d/db (a+b)b = a + 2b
  }
}

TEST(ElementwiseOpErrors, ShapeAndDtypeMismatchesNameOpAndLayer) {
  LayerScope layer("blk");
  try {
    ops::add(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add blk"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3, 2)"), std::string::npos) << m;
  }
  try {
    ops::mul(Tensor::zeros({2}), Tensor::zeros({2}, DType::i64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul blk"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::scale(Tensor::zeros({2}, DType::u8), 2.0f), Error);
}

TEST(ElementwiseOp, DoublePrecisionWorks) {
  Tensor a = Tensor::from_vector({3}, std::vector<double>{1, 2, 3}).set_requires_grad(true);
  Tensor b = Tensor::from_vector({3}, std::vector<double>{4, 5, 6});
  Tensor y = ops::scale(ops::mul(a, b), 2.0f);
  EXPECT_EQ(y.dtype(), DType::f64);
  backward(y, Tensor::from_vector({3}, std::vector<double>{1, 1, 1}));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{8, 10, 12}));
}
