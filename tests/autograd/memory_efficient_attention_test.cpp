// Memory-efficient attention (AttentionOptions::memory_efficient, the backends' attention_forward /
// attention_backward) against the standard path: the same output and gradients with and without
// causal and padding masks and dropout (the same Philox mask), on the CPU and the emulated GPU; a
// gradient check; saved tensors under their names, the log-sum-exp exact under a compressing
// rule; saved bytes that grow linearly in T; key-length errors that name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::EmulatedGpu;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

// Element-wise |got - want| <= atol + rtol |want|.
void expect_close(const Tensor& got, const Tensor& want, float atol, float rtol, const std::string& what) {
  const std::vector<float> g = got.to(Device::cpu()).to_vector(), w = want.to(Device::cpu()).to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])) && ++bad <= 5)
      ADD_FAILURE() << what << " at " << i << ": " << g[i] << " vs " << w[i];
  EXPECT_EQ(bad, 0) << what;
}

std::vector<std::string> saved_ops(Fp32Policy& policy) {
  std::vector<std::string> ops;
  for (const SavedRecord& r : policy.describe()) ops.push_back(r.op);
  return ops;
}

Tensor lengths_tensor(const std::vector<int64_t>& v, Device device) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::i64, Layout::Plain, MemTag::Data,
                           Device::cpu());
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t.to(device);
}

struct Case {
  std::string name;
  int64_t B, H, T, S, E, Ev;
  bool causal, padded;
  float dropout;
};

// Sizes that cross the CPU kernel's tiles (64 queries, 128 keys) and leave ragged edges.
const std::vector<Case> kCases = {
    {"plain", 2, 3, 37, 37, 16, 16, false, false, 0.0f},
    {"causal", 2, 2, 150, 150, 32, 32, true, false, 0.0f},
    {"cross_causal", 1, 2, 20, 140, 8, 12, true, false, 0.0f},
    {"padded", 3, 2, 130, 130, 16, 16, false, true, 0.0f},
    {"causal_padded", 2, 2, 70, 70, 16, 16, true, true, 0.0f},
    {"dropout", 2, 2, 90, 140, 16, 24, false, false, 0.2f},
    {"all", 2, 3, 131, 131, 16, 16, true, true, 0.3f},
};

struct Result {
  Tensor y, dq, dk, dv;
};

Result run(const Case& c, bool memory_efficient, Device device) {
  DeviceScope on(device);
  Tensor q = random_tensor({c.B, c.H, c.T, c.E}, 1, -2.0f, 2.0f).to(device).set_requires_grad(true);
  Tensor k = random_tensor({c.B, c.H, c.S, c.E}, 2, -2.0f, 2.0f).to(device).set_requires_grad(true);
  Tensor v = random_tensor({c.B, c.H, c.S, c.Ev}, 3).to(device).set_requires_grad(true);
  const Tensor w = random_tensor({c.B, c.H, c.T, c.Ev}, 4).to(device);  // the upstream gradient
  ops::AttentionOptions o;
  o.causal = c.causal;
  o.memory_efficient = memory_efficient;
  if (c.dropout > 0) o.dropout_p = c.dropout, o.training = true, o.seed = 11, o.stream = 7;
  if (c.padded) {
    std::vector<int64_t> len;
    for (int64_t b = 0; b < c.B; ++b) len.push_back(b == 0 ? c.S : 1 + (c.S * (b + 1)) / (c.B + 2));
    o.key_lengths = lengths_tensor(len, device);
  }
  Fp32Policy policy;
  PolicyScope scope(policy);
  Result r;
  r.y = ops::scaled_dot_product_attention(q, k, v, o);
  backward(r.y, w);
  r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
  return r;
}

class MemoryEfficientAttention : public ::testing::TestWithParam<bool> {};  // on the emulated GPU?

TEST_P(MemoryEfficientAttention, MatchesTheStandardPath) {
  std::optional<EmulatedGpu> gpu;
  if (GetParam()) gpu.emplace();
  const Device device = GetParam() ? EmulatedGpu::device() : Device::cpu();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Result want = run(c, false, device), got = run(c, true, device);
    ASSERT_EQ(got.y.shape(), want.y.shape());
    EXPECT_EQ(got.y.device(), device);
    expect_close(got.y, want.y, 1e-6f, 1e-5f, c.name + " y");
    expect_close(got.dq, want.dq, 2e-5f, 1e-4f, c.name + " dq");
    expect_close(got.dk, want.dk, 2e-5f, 1e-4f, c.name + " dk");
    expect_close(got.dv, want.dv, 2e-5f, 1e-4f, c.name + " dv");
  }
}

INSTANTIATE_TEST_SUITE_P(CpuAndEmulatedGpu, MemoryEfficientAttention, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "emulated_gpu" : "cpu"; });

// Padding really masks: a padded key's value has no effect on y, and gets no gradient.
TEST(MemoryEfficientAttentionMasks, PaddedKeysNeitherContributeNorGetGradients) {
  Tensor q = random_tensor({2, 1, 5, 4}, 5).set_requires_grad(true);
  Tensor k = random_tensor({2, 1, 9, 4}, 6).set_requires_grad(true);
  Tensor v = random_tensor({2, 1, 9, 4}, 7).set_requires_grad(true);
  ops::AttentionOptions o;
  o.memory_efficient = true;
  o.key_lengths = lengths_tensor({9, 4}, Device::cpu());
  Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
  backward(y, Tensor::full(y.shape(), 1.0f));
  const auto dk = k.grad().to_vector(), dv = v.grad().to_vector();
  for (int64_t j = 4; j < 9; ++j)
    for (int64_t e = 0; e < 4; ++e) {
      EXPECT_EQ(dk[(9 + j) * 4 + e], 0.0f) << j;
      EXPECT_EQ(dv[(9 + j) * 4 + e], 0.0f) << j;
    }
  // A key of sample 1 inside its length does get a gradient.
  EXPECT_NE(dv[(9 + 3) * 4], 0.0f);
}

TEST(MemoryEfficientAttentionGrad, CentralDifferencesPlainCausalPaddedAndWithDropout) {
  Tensor q = random_tensor({2, 2, 5, 3}, 16).set_requires_grad(true);
  Tensor k = random_tensor({2, 2, 5, 3}, 17).set_requires_grad(true);
  Tensor v = random_tensor({2, 2, 5, 4}, 18).set_requires_grad(true);
  for (int mode = 0; mode < 4; ++mode) {
    SCOPED_TRACE(mode);
    ops::AttentionOptions o;
    o.memory_efficient = true;
    o.causal = mode == 1 || mode == 3;
    if (mode >= 2) o.key_lengths = lengths_tensor({5, 3}, Device::cpu());
    if (mode == 3) o.dropout_p = 0.3f, o.training = true, o.seed = 5, o.stream = 9;  // a fixed mask
    gradcheck([&](const std::vector<Tensor>& in) { return ops::scaled_dot_product_attention(in[0], in[1], in[2], o); },
              {q, k, v});
  }
}

// What it saves: q, k, v, y and the log-sum-exp under their own names; under a rule compressing
// every op to 2 bits, q, k and the log-sum-exp stay exact (backward recomputes exp(q k^T - lse):
// autograd/ops/attention.cpp), v and y are compressed.
TEST(MemoryEfficientAttentionStore, SavesQKVOutputAndAnExactLogSumExpQAndK) {
  Tensor q = random_tensor({2, 3, 6, 4}, 19).set_requires_grad(true);
  Tensor k = random_tensor({2, 3, 6, 4}, 20).set_requires_grad(true);
  Tensor v = random_tensor({2, 3, 6, 4}, 21).set_requires_grad(true);
  ops::AttentionOptions o;
  o.memory_efficient = true;
  o.dropout_p = 0.5f, o.training = true;
  {
    Fp32Policy policy;
    PolicyScope scope(policy);
    LayerScope layer("enc.0.attn");
    Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
    const auto recs = policy.describe();
    EXPECT_EQ(saved_ops(policy), (std::vector<std::string>{"attention_q", "attention_k", "attention_v",
                                                            "attention_out", "attention_lse"}));
    ASSERT_EQ(recs.size(), 5u);
    EXPECT_EQ(recs[4].numel, 2 * 3 * 6);  // (B, H, T)
    EXPECT_EQ(recs[0].layer, "enc.0.attn");
    backward(y, Tensor::full(y.shape(), 1.0f));
  }
  StorePolicySpec spec;
  spec.default_scheme.scheme = "deterministic";  // 2-bit per-group quantization of every saved tensor
  spec.default_scheme.options = {{"bits", "2"}};
  RulePolicy compress(spec);
  PolicyScope scope(compress);
  Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
  int exact = 0;
  for (const SavedRecord& r : compress.describe()) {
    if (r.op == "attention_lse" || r.op == "attention_q" || r.op == "attention_k") {
      EXPECT_EQ(r.bits, 32) << r.op << " must stay exact";
      ++exact;
    } else {
      EXPECT_LT(r.bits, 32) << r.op << " should be compressed";
    }
  }
  EXPECT_EQ(exact, 3);
  clear_tape();
}

// Saved bytes per sample, FP32 store, one head of 64: linear in T against the standard path's T^2.
// The bound: at most 1/8 of the standard path's at T = 2048 and 1/15 at T = 4096.
TEST(MemoryEfficientAttentionStore, SavedBytesGrowLinearlyInT) {
  for (const auto& [T, bound] : std::vector<std::pair<int64_t, double>>{{2048, 1.0 / 8}, {4096, 1.0 / 15}}) {
    int64_t bytes[2];
    for (int me = 0; me < 2; ++me) {
      Tensor q = random_tensor({1, 1, T, 64}, 30).set_requires_grad(true);
      Tensor k = random_tensor({1, 1, T, 64}, 31), v = random_tensor({1, 1, T, 64}, 32);
      ops::AttentionOptions o;
      o.memory_efficient = me == 1;
      o.causal = true;
      Fp32Policy policy;
      PolicyScope scope(policy);
      Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
      bytes[me] = 0;
      for (const SavedRecord& r : policy.describe()) bytes[me] += r.bytes;
      clear_tape();
    }
    const double ratio = static_cast<double>(bytes[1]) / static_cast<double>(bytes[0]);
    EXPECT_LE(ratio, bound) << "T " << T << ": " << bytes[1] << " vs " << bytes[0] << " bytes";
    // q (the only input needing grad here... all three are kept for dq) + y + lse: (2 T 64 + T) f32 at least.
    EXPECT_GE(bytes[1], (2 * T * 64 + T) * 4) << T;
  }
}

TEST(MemoryEfficientAttentionErrors, KeyLengthsOfTheWrongShapeNameTheOpAndLayer) {
  LayerScope layer("enc.1.attn");
  ops::AttentionOptions o;
  o.memory_efficient = true;
  o.key_lengths = lengths_tensor({3, 3, 3}, Device::cpu());  // 3 lengths for 2 samples
  try {
    ops::scaled_dot_product_attention(Tensor::zeros({2, 2, 3, 4}), Tensor::zeros({2, 2, 3, 4}),
                                      Tensor::zeros({2, 2, 3, 4}), o);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("attention enc.1.attn"), std::string::npos) << m;
    EXPECT_NE(m.find("key lengths must be (2) i64"), std::string::npos) << m;
  }
}

}  // namespace
