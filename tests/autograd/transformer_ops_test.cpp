// The Transformer ops: permute, concat / split / narrow, expand, broadcasting add and mul at
// (N, T, D) + (1, T, D), layernorm over (N, T, D), and scaled dot-product attention.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "quant/fewbit/fewbit_table.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

// Reference attention in double on plain host data: q (B, T, E), k (B, S, E), v (B, S, Ev).
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t B = q.dim(0), T = q.dim(1), E = q.dim(2), S = k.dim(1), Ev = v.dim(2);
  const auto qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  std::vector<double> y(static_cast<size_t>(B * T * Ev), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -1e300;
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += double(qv[(b * T + t) * E + e]) * kv[(b * S + j) * E + e];
        s[j] = (causal && j > t + (S - T)) ? -INFINITY : d / std::sqrt(double(E));
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) y[(b * T + t) * Ev + e] += s[j] / z * vv[(b * S + j) * Ev + e];
    }
  return y;
}

std::vector<std::string> saved_ops(Fp32Policy& policy) {
  std::vector<std::string> ops;
  for (const auto& r : policy.describe()) ops.push_back(r.op);
  return ops;
}

}  // namespace

TEST(PermuteOp, MovesAxesAndItsGradientGoesBack) {
  Tensor x = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::vector<int64_t> p{1, 0};
  Tensor t = ops::permute(x, p);
  EXPECT_EQ(t.shape(), Shape({3, 2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // (2, 3, 4, 5) -> (3, 0, 2, 1): element [a, b, c, d] lands at [d, a, c, b].
  Tensor y = random_tensor({2, 3, 4, 5}, 1);
  const std::vector<int64_t> p4{3, 0, 2, 1};
  Tensor z = ops::permute(y, p4);
  ASSERT_EQ(z.shape(), Shape({5, 2, 4, 3}));
  const auto yv = y.to_vector(), zv = z.to_vector();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t d = 0; d < 5; ++d) ASSERT_EQ(zv[((d * 2 + a) * 4 + c) * 3 + b], yv[((a * 3 + b) * 4 + c) * 5 + d]);
  y.set_requires_grad(true);
  gradcheck([&](const std::vector<Tensor>& in) { return ops::permute(in[0], p4); }, {y});
}

TEST(PermuteOpErrors, NotAPermutationNamesTheOp) {
  LayerScope layer("blk");
  const std::vector<int64_t> bad{0, 0};
  try {
    ops::permute(Tensor::zeros({2, 3}), bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("permute blk"), std::string::npos) << e.what();
  }
}

TEST(ConcatOp, JoinsAlongAnyDimAndSplitIsItsInverse) {
  Tensor a = random_tensor({2, 1, 3}, 2), b = random_tensor({2, 4, 3}, 3);
  Tensor c = ops::concat({a, b}, 1);
  ASSERT_EQ(c.shape(), Shape({2, 5, 3}));
  const auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t d = 0; d < 3; ++d)
        EXPECT_EQ(cv[(n * 5 + t) * 3 + d], t == 0 ? av[n * 3 + d] : bv[(n * 4 + t - 1) * 3 + d]);
  auto parts = ops::split(c, {1, 4}, -2);
  EXPECT_EQ(parts[0].to_vector(), av);
  EXPECT_EQ(parts[1].to_vector(), bv);
  EXPECT_EQ(ops::narrow(c, 1, 1, 4).to_vector(), bv);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::concat({in[0], in[1]}, 1); }, {a, b});
  gradcheck([](const std::vector<Tensor>& in) { return ops::concat({in[0], in[1]}, -1); },
            {random_tensor({2, 3}, 4).set_requires_grad(true), random_tensor({2, 2}, 5).set_requires_grad(true)});
}

TEST(SplitOp, GradientOfUnusedPartsIsZero) {
  Tensor x = random_tensor({3, 6}, 6).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::split(in[0], {2, 3, 1}, 1)[1]; }, {x});
  gradcheck([](const std::vector<Tensor>& in) {
    auto p = ops::split(in[0], {2, 3, 1}, 1);
    return ops::concat({p[2], p[0]}, 1);
  }, {x});
  gradcheck([](const std::vector<Tensor>& in) { return ops::narrow(in[0], 0, 1, 2); }, {x});
}

TEST(SplitOpErrors, SizesThatDoNotSumNameTheOp) {
  try {
    ops::split(Tensor::zeros({2, 5}), {2, 2}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sum to 4"), std::string::npos) << e.what();
  }
}

TEST(ExpandOp, StretchesAClassTokenAndSumsItsGradient) {
  Tensor tok = random_tensor({1, 1, 4}, 7);
  Tensor e = ops::expand(tok, {3, 1, 4});
  ASSERT_EQ(e.shape(), Shape({3, 1, 4}));
  const auto tv = tok.to_vector(), ev = e.to_vector();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(ev[i], tv[i % 4]);
  tok.set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::expand(in[0], {3, 1, 4}); }, {tok});
}

TEST(BroadcastOps, PositionEmbeddingAddAndMulAtNTD) {
  Tensor x = random_tensor({2, 5, 4}, 8).set_requires_grad(true);
  Tensor pos = random_tensor({1, 5, 4}, 9).set_requires_grad(true);
  Tensor y = ops::add(x, pos);
  const auto xv = x.to_vector(), pv = pos.to_vector(), yv = y.to_vector();
  for (int64_t i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(yv[i], xv[i] + pv[i % 20]);
  clear_tape();
  gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {x, pos});
  gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {x, pos});
}

TEST(LayerNormOp, NormalizesTheLastDimOfNTD) {
  Tensor x = random_tensor({2, 5, 8}, 10, -2.0f, 2.0f).set_requires_grad(true);
  Tensor w = random_tensor({8}, 11, 0.5f, 1.5f).set_requires_grad(true);
  Tensor b = random_tensor({8}, 12).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::layernorm(in[0], in[1], in[2]); }, {x, w, b});
}

TEST(AttentionOp, MatchesADoubleReferencePlainAndCausal) {
  NoGradScope ng;
  Tensor q = random_tensor({3, 4, 5}, 13, -2.0f, 2.0f), k = random_tensor({3, 6, 5}, 14, -2.0f, 2.0f);
  Tensor v = random_tensor({3, 6, 2}, 15);
  for (bool causal : {false, true}) {
    ops::AttentionOptions o;
    o.causal = causal;
    Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
    ASSERT_EQ(y.shape(), Shape({3, 4, 2}));
    const auto want = reference_attention(q, k, v, causal);
    const auto got = y.to_vector();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "causal " << causal << " at " << i;
  }
}

TEST(AttentionOpGrad, CentralDifferencesPlainCausalAndWithDropout) {
  Tensor q = random_tensor({2, 2, 4, 3}, 16).set_requires_grad(true);
  Tensor k = random_tensor({2, 2, 4, 3}, 17).set_requires_grad(true);
  Tensor v = random_tensor({2, 2, 4, 3}, 18).set_requires_grad(true);
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    ops::AttentionOptions o;
    o.causal = mode >= 1;
    if (mode == 2) o.dropout_p = 0.3f, o.training = true, o.seed = 5, o.stream = 9;  // a fixed mask
    gradcheck([&](const std::vector<Tensor>& in) { return ops::scaled_dot_product_attention(in[0], in[1], in[2], o); },
              {q, k, v});
  }
}

TEST(AttentionOpStore, SavesQKVSoftmaxAndDropoutMaskUnderTheirOwnNames) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor q = random_tensor({2, 3, 4}, 19).set_requires_grad(true);
  Tensor k = random_tensor({2, 5, 4}, 20).set_requires_grad(true);
  Tensor v = random_tensor({2, 5, 6}, 21).set_requires_grad(true);
  ops::AttentionOptions o;
  o.dropout_p = 0.5f;
  o.training = true;
  {
    LayerScope layer("blk.self_attention");
    Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
    const auto recs = policy.describe();
    ASSERT_EQ(recs.size(), 5u);
    EXPECT_EQ(saved_ops(policy),
              (std::vector<std::string>{"attention_q", "attention_k", "attention_v", "attention_softmax",
                                        "attention_dropout"}));
    EXPECT_EQ(recs[3].numel, 2 * 3 * 5);  // P (B, T, S)
    EXPECT_EQ(recs[4].need, Need::Mask);
    EXPECT_EQ(recs[4].bytes, 2 * 3 * 5);  // u8 mask
    EXPECT_EQ(recs[0].layer, "blk.self_attention");
    backward(y, Tensor::full(y.shape(), 1.0f));
  }
  EXPECT_EQ(policy.describe().size(), 0u);
  // Eval: no dropout, no mask; only v needing grad keeps just the softmax output.
  o.training = false;
  Tensor qn = random_tensor({2, 3, 4}, 19), kn = random_tensor({2, 5, 4}, 20);
  Tensor y = ops::scaled_dot_product_attention(qn, kn, v, o);
  EXPECT_EQ(saved_ops(policy), (std::vector<std::string>{"attention_softmax"}));
  clear_tape();
}

TEST(AttentionOpErrors, MismatchedShapesNameTheOpAndLayer) {
  LayerScope layer("enc.0.attn");
  try {
    ops::scaled_dot_product_attention(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 5}), Tensor::zeros({2, 3, 4}), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention enc.0.attn"), std::string::npos) << e.what();
  }
}

// GELU's tanh form in the few-bit store: 3-bit interval indices (3/32 of FP32's bytes, plus
// padding), and a gradient within the shipped table's largest error |f' - q| of the exact one.
TEST(GeluTanhFewBit, StoresThreeBitIndicesAndBoundsTheGradientError) {
  const Tensor x0 = random_tensor({4, 256}, 22, -4.0f, 4.0f);
  Tensor exact;
  {
    Tensor x = x0.clone().set_requires_grad(true);
    backward(ops::activation(x, "gelu_tanh"), Tensor::full({4, 256}, 1.0f));
    exact = x.grad();
  }
  StorePolicySpec spec;
  spec.rules.push_back({{"gelu_tanh"}, {}, {"fewbit", {{"bits", "3"}}, "test"}});
  RulePolicy policy(spec);
  PolicyScope scope(policy);
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor y = ops::activation(x, "gelu_tanh");
  const auto recs = policy.describe();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].scheme, "fewbit");
  EXPECT_LE(recs[0].bytes, 4 * 256 * 3 / 8 + 64);
  backward(y, Tensor::full({4, 256}, 1.0f));
  const double bound = fewbit_table("gelu_tanh", 3).max_abs_error;
  EXPECT_GT(bound, 0.0);
  const auto g = x.grad().to_vector(), e = exact.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_LE(std::abs(g[i] - e[i]), bound + 1e-5) << i;
}
