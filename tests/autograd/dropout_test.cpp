// dropout: keep rate, exact mask, reproducibility from (seed, stream), identity cases.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/philox.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

TEST(DropoutOp, KeepRateIsOneMinusPAndKeptValuesAreScaled) {
  const int64_t n = 200000;
  for (float p : {0.1f, 0.5f, 0.8f}) {
    Tensor y = ops::dropout(Tensor::full({n}, 1.0f), p, true, 42, 7);
    int64_t kept = 0;
    for (float v : y.span<float>()) {
      if (v != 0.0f) {
        ++kept;
        EXPECT_EQ(v, 1.0f / (1.0f - p));
      }
    }
    const double rate = static_cast<double>(kept) / n, sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(rate, 1.0 - p, 5 * sigma) << "p = " << p;
  }
}

TEST(DropoutOp, MaskIsSavedExactlyAndIsPhiloxOfTheElementIndex) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  const int64_t n = 1001;  // not a multiple of the 256-element block: a tail
  const float p = 0.3f;
  Tensor x = random_tensor({n}, 5).set_requires_grad(true);
  Tensor y = ops::dropout(x, p, true, 123, 9);
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].need, Need::Mask);
  EXPECT_EQ(rec[0].op, "dropout");
  EXPECT_EQ(rec[0].bytes, n);  // one u8 per element, as PyTorch's bool mask
  Tensor seed = random_tensor({n}, 6);
  backward(y, seed);
  const std::vector<float> vx = x.to_vector(), vy = y.to_vector(), vs = seed.to_vector(), g = x.grad().to_vector();
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w[4];  // element i = 256 b + r: word r / 64 of counter 64 b + r % 64
    Philox4x32::generate(123, 9, static_cast<uint64_t>(64 * (i / 256) + i % 64), w);
    const bool keep = Philox4x32::to_uniform(w[(i % 256) / 64]) >= p;
    EXPECT_EQ(vy[i], keep ? vx[i] * scale : 0.0f) << i;
    EXPECT_EQ(g[i], keep ? vs[i] * scale : 0.0f) << i;  // the mask of backward is the mask of forward
  }
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(DropoutOp, SameSeedAndStreamReproduceOthersDiffer) {
  Tensor x = random_tensor({4096}, 1);
  const auto a = ops::dropout(x, 0.5f, true, 1, 2).to_vector();
  EXPECT_EQ(a, ops::dropout(x, 0.5f, true, 1, 2).to_vector());
  EXPECT_NE(a, ops::dropout(x, 0.5f, true, 1, 3).to_vector());
  EXPECT_NE(a, ops::dropout(x, 0.5f, true, 2, 2).to_vector());
}

TEST(DropoutOp, IdentityInEvalOrWithPZeroAndZerosWithPOne) {
  Tensor x = random_tensor({64}, 1);
  EXPECT_TRUE(ops::dropout(x, 0.5f, false, 1, 1).same_storage(x));
  EXPECT_TRUE(ops::dropout(x, 0.0f, true, 1, 1).same_storage(x));
  for (float v : ops::dropout(x, 1.0f, true, 1, 1).to_vector()) EXPECT_EQ(v, 0.0f);
}

TEST(DropoutOp, BlockedLayoutIsKept) {
  Tensor x = random_tensor({1, 16, 2, 2}, 3).to_layout(Layout::nChw16c);
  Tensor y = ops::dropout(x, 0.5f, true, 4, 4);
  EXPECT_EQ(y.layout(), Layout::nChw16c);
}

TEST(DropoutOpGrad, CentralDifferences) {
  Tensor x = random_tensor({3, 7}, 8).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.4f, true, 77, 1); }, {x});
}

TEST(DropoutOpErrors, BadProbabilityNamesTheLayer) {
  LayerScope layer("drop1");
  try {
    ops::dropout(Tensor::zeros({3}), 1.5f, true, 0, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dropout drop1"), std::string::npos) << e.what();
  }
}
