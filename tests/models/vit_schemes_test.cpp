// Every tensor the ViT saves can be compressed by every scheme: per-group (actnn), GACT,
// mixed 2/4-bit, deterministic, and few-bit for its GELUs. One training forward + backward of a
// small ViT under each policy: every saved tensor that is not exact by contract (layernorm
// statistics, dropout masks) is held by the scheme asked for in fewer bytes than FP32, and the
// gradients stay close to the FP32 ones.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "models/vit.h"
#include "tests/models/vit_fixture.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::random_tensor;

namespace {

VitConfig small_config() {
  VitConfig c = packrat::testing::small_vit_config();
  c.seed = 3;  // no dropout: each model built draws other dropout streams, and the runs must compare
  return c;
}

// The flattened parameter gradients of one step under `policy`.
std::vector<float> step_gradients(StorePolicy& policy, std::vector<SavedRecord>* records) {
  PolicyScope scope(policy);
  VisionTransformer m(small_config());
  const Tensor x = random_tensor({4, 3, 8, 8}, 9);
  Tensor t = Tensor::empty({4}, DType::i64);
  for (int64_t i = 0; i < 4; ++i) t.data<int64_t>()[i] = i;
  Tensor loss = ops::cross_entropy(m(x), t);
  if (records) *records = policy.describe();
  backward(loss);
  std::vector<float> g;
  for (auto& [name, p] : m.named_parameters()) {
    const auto v = p.grad().to_vector();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

StorePolicySpec everything(const std::string& scheme, std::map<std::string, std::string> options) {
  StorePolicySpec s;
  s.default_scheme = {scheme, std::move(options), "test"};
  return s;
}

}  // namespace

TEST(VitSchemes, EverySavedTensorIsCompressedByEveryScheme) {
  Fp32Policy fp32;
  const std::vector<float> g32 = step_gradients(fp32, nullptr);
  struct Case {
    std::string scheme;
    StorePolicySpec spec;
  };
  std::vector<Case> cases{{"actnn", everything("actnn", {{"bits", "2"}})},
                          {"gact", everything("gact", {{"avg_bits", "3"}})},
                          {"mixed", everything("mixed", {{"preset", "2/4@0.5"}})},
                          {"deterministic", everything("deterministic", {{"bits", "4"}})}};
  for (auto& c : cases) {
    SCOPED_TRACE(c.scheme);
    RulePolicy policy(c.spec);
    std::vector<SavedRecord> recs;
    const std::vector<float> g = step_gradients(policy, &recs);
    int compressed = 0;
    for (const auto& r : recs) {
      const bool exact = r.need == Need::Mask || r.need == Need::Index || r.op == "cross_entropy" ||
                         (r.op == "layernorm" && r.numel == 4 * 5);  // statistics (one per row), kept exactly
      if (exact) continue;
      EXPECT_EQ(r.scheme, c.scheme) << r.op << " " << r.layer;
      EXPECT_LT(r.bytes, r.fp32_bytes) << r.op << " " << r.layer;
      ++compressed;
    }
    // conv_proj, per block (ln_1, in_proj, q k v softmax, out_proj, ln_2, mlp.0, gelu, mlp.3), encoder.ln, head
    EXPECT_EQ(compressed, 1 + 2 * 11 + 1 + 1);
    EXPECT_GT(cosine(g, g32), 0.8);
  }
}

TEST(VitSchemes, FewBitGeluAndAttentionRulesTargetTheirTensors) {
  StorePolicySpec s;
  s.rules.push_back({{"gelu"}, {}, {"fewbit", {{"bits", "3"}}, "test"}});
  s.rules.push_back({{"attention_softmax"}, {}, {"actnn", {{"bits", "4"}}, "test"}});
  RulePolicy policy(s);
  std::vector<SavedRecord> recs;
  step_gradients(policy, &recs);
  int gelu = 0, softmax = 0;
  for (const auto& r : recs) {
    if (r.op == "gelu") {
      EXPECT_EQ(r.scheme, "fewbit");
      EXPECT_LE(r.bytes * 8, r.fp32_bytes);  // 3 bits (+ padding) of 32
      ++gelu;
    } else if (r.op == "attention_softmax") {
      EXPECT_EQ(r.scheme, "actnn");
      ++softmax;
    } else {
      EXPECT_EQ(r.scheme, "fp32") << r.op;
    }
  }
  EXPECT_EQ(gelu, 2);
  EXPECT_EQ(softmax, 2);
}
