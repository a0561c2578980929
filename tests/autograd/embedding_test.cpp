// embedding lookup and its scatter-add gradient.
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

TEST(EmbeddingOp, MatchesPyTorchGoldenWithRepeatedIds) {
  auto g = packrat::testing::load_golden("embedding.txt");
  Tensor ids = g.at("ids").i64();
  Tensor w = g.at("w").f32().set_requires_grad(true);
  Tensor y = ops::embedding(ids, w);
  packrat::testing::expect_close(y, g.at("y"), 0, 0, "y");
  backward(y, g.at("gout").f32());
  packrat::testing::expect_close(w.grad(), g.at("dw"), 1e-7, 1e-6, "dw");
}

TEST(EmbeddingOp, SavesTheIdsAsAnIndex) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor ids = Tensor::zeros({2, 3}, DType::i64);
  Tensor w = random_tensor({5, 4}, 1).set_requires_grad(true);
  Tensor y = ops::embedding(ids, w);
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].need, Need::Index);
  EXPECT_EQ(rec[0].numel, 6);
  clear_tape();
}

TEST(EmbeddingOpGrad, CentralDifferences) {
  Tensor ids = Tensor::empty({4}, DType::i64);
  const int64_t v[] = {2, 0, 2, 3};
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = v[i];
  Tensor w = random_tensor({4, 3}, 2).set_requires_grad(true);
  gradcheck([ids](const std::vector<Tensor>& in) { return ops::embedding(ids, in[0]); }, {w});
}

TEST(EmbeddingOpErrors, OutOfRangeIdsAndWrongDtypeNameOpAndLayer) {
  LayerScope layer("tok");
  Tensor w = Tensor::zeros({5, 2});
  Tensor ids = Tensor::zeros({3}, DType::i64);
  ids.data<int64_t>()[1] = 5;
  try {
    ops::embedding(ids, w);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("embedding tok"), std::string::npos) << m;
    EXPECT_NE(m.find("id 5"), std::string::npos) << m;
  }
  try {
    ops::embedding(Tensor::zeros({3}, DType::i32), w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
}
