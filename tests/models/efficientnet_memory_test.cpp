// Every tensor EfficientNet saves is named after its block in the memory report and is compressed
// by every scheme: per-group (actnn, gact), mixed, deterministic quantize everything but the exact
// batchnorm statistics; the few-bit store takes every SiLU / sigmoid derivative and every mask.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "autograd/tape.h"
#include "models/registry.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::random_tensor;

namespace {

// The records held after one training-mode forward of the small V2 (Fused-MBConv and MBConv
// blocks, SE, drop path, classifier dropout) under `spec`.
std::vector<SavedRecord> saved_after_forward(const StorePolicySpec& spec) {
  ModelSpec m;
  m.arch = "efficientnet_v2_small";
  m.in_channels = 3;
  m.num_classes = 10;
  auto model = make_model(m);
  RulePolicy policy(spec);
  PolicyScope scope(policy);
  policy.begin_step(0);
  Tensor x;
  {
    TagScope tag(MemTag::Data);
    x = random_tensor({4, 3, 16, 16}, 1);
  }
  Tensor logits = (*model)(x);
  auto records = policy.describe();
  clear_tape();
  return records;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

StorePolicySpec scheme(const std::string& name, std::map<std::string, std::string> options = {}) {
  StorePolicySpec s;
  s.default_scheme.scheme = name;
  s.default_scheme.options = std::move(options);
  return s;
}

}  // namespace

TEST(EfficientNetMemory, EverySavedTensorIsNamedAfterItsBlock) {
  const auto recs = saved_after_forward(scheme("fp32"));
  ASSERT_FALSE(recs.empty());
  std::set<std::string> seen;
  for (const auto& r : recs) {
    EXPECT_TRUE(starts_with(r.layer, "features.") || starts_with(r.layer, "classifier.")) << r.op << " " << r.layer;
    seen.insert(r.op + " " + r.layer);
  }
  // features.1: Fused-MBConv (expand 1), features.4: MBConv with SE (block.2) and drop path.
  for (const char* want : {"conv2d features.0.0", "batchnorm2d features.0.1", "silu features.0.2",
                           "conv2d features.2.0.block.0.0", "conv2d features.4.0.block.1.0",
                           "conv2d features.4.0.block.2.fc1", "silu features.4.0.block.2.activation",
                           "sigmoid features.4.0.block.2.scale_activation", "mul features.4.0.block.2",
                           "drop_path features.5.1.stochastic_depth", "dropout classifier.0", "linear classifier.1"})
    EXPECT_TRUE(seen.count(want)) << "no saved tensor named '" << want << "'";
}

TEST(EfficientNetMemory, EveryQuantizingSchemeCompressesEverythingButBatchnormStatistics) {
  const auto fp32 = saved_after_forward(scheme("fp32"));
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"actnn", {{"bits", "2"}}},
           {"gact", {{"avg_bits", "2"}, {"initial_bits", "2"}}},
           {"mixed", {{"preset", "2/4@0.5"}}},
           {"deterministic", {{"bits", "3"}}}}) {
    const auto recs = saved_after_forward(scheme(name, options));
    EXPECT_EQ(recs.size(), fp32.size()) << name;
    int64_t bytes = 0, fp32_bytes = 0;
    for (const auto& r : recs) {
      bytes += r.bytes;
      fp32_bytes += r.fp32_bytes;
      if (r.scheme == name) continue;
      // Kept in FP32: only batchnorm's per-channel statistics (exact requests).
      EXPECT_EQ(r.op, "batchnorm2d") << name << ": " << r.op << " " << r.layer << " kept as " << r.scheme;
      EXPECT_LE(r.numel, 1024) << name << " " << r.layer;
    }
    EXPECT_LT(bytes * 5, fp32_bytes) << name << ": under a fifth of FP32's bytes";
  }
}

TEST(EfficientNetMemory, FewbitTakesEveryActivationDerivativeAndMask) {
  const auto recs = saved_after_forward(scheme("fewbit", {{"bits", "2"}}));
  int64_t derivatives = 0, masks = 0;
  for (const auto& r : recs) {
    if (r.need == Need::Derivative || r.need == Need::Mask) {
      EXPECT_EQ(r.scheme, "fewbit") << r.op << " " << r.layer;
      derivatives += r.need == Need::Derivative;
      masks += r.need == Need::Mask;
    } else {
      EXPECT_EQ(r.scheme, "fp32") << r.op << " " << r.layer;  // conv/linear/batchnorm inputs fall to FP32
    }
  }
  EXPECT_GT(derivatives, 20);
  EXPECT_GE(masks, 2);  // drop path (several blocks) and the classifier's dropout
}
