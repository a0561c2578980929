// reshape, flatten, transpose_last2.
#include <gtest/gtest.h>

#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(ShapeOp, ReshapeAndFlattenAreViewsOfPlainData) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor r = ops::reshape(x, {6, 4});
  EXPECT_EQ(r.shape(), Shape({6, 4}));
  EXPECT_TRUE(r.same_storage(x));
  Tensor f = ops::flatten(x);
  EXPECT_EQ(f.shape(), Shape({2, 12}));
  EXPECT_EQ(ops::flatten(x, 0).shape(), Shape({24}));
  EXPECT_EQ(ops::flatten(x, -1).shape(), Shape({2, 3, 4}));
  EXPECT_EQ(f.to_vector(), x.to_vector());
}

TEST(ShapeOp, FlattenOfABlockedTensorIsInLogicalOrder) {
  Tensor x = random_tensor({2, 16, 2, 2}, 3);
  Tensor b = x.to_layout(Layout::nChw16c).set_requires_grad(true);
  Tensor f = ops::flatten(b);
  EXPECT_EQ(f.layout(), Layout::Plain);
  EXPECT_EQ(f.to_vector(), x.to_vector());
  backward(f, Tensor::full(f.shape(), 1.0f));
  EXPECT_EQ(b.grad().layout(), Layout::nChw16c);
  EXPECT_EQ(b.grad().shape(), x.shape());
}

TEST(ShapeOp, TransposeLast2Copies) {
  Tensor x = Tensor::from_vector({2, 2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor t = ops::transpose_last2(x);
  EXPECT_EQ(t.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12}));
  EXPECT_FALSE(t.same_storage(x));
  Tensor big = random_tensor({3, 37, 45}, 4);  // more than one tile each way
  Tensor back = ops::transpose_last2(ops::transpose_last2(big));
  EXPECT_EQ(back.to_vector(), big.to_vector());
}

TEST(ShapeOpGrad, CentralDifferences) {
  Tensor x = random_tensor({2, 3, 4}, 7).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::reshape(in[0], {4, 6}); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::flatten(in[0]); }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::transpose_last2(in[0]); }, {x});
  // Through a following elementwise op, so the gradient is not just the seed reshaped.
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(ops::transpose_last2(in[0]), ops::transpose_last2(in[0])); },
            {x});
}

TEST(ShapeOpErrors, BadShapesNameOpAndLayer) {
  LayerScope layer("head");
  Tensor x = Tensor::zeros({2, 3});
  try {
    ops::reshape(x, {4, 2});
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("reshape head"), std::string::npos) << m;
    EXPECT_NE(m.find("(4, 2)"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::flatten(x, 2), Error);
  EXPECT_THROW(ops::transpose_last2(Tensor::zeros({3})), Error);
}
