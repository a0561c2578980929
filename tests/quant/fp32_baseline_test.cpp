// The FP32 figures a compressing policy reports are what the FP32 store really holds: a
// buffer two ops save (relu's output, which the next layer saves as its input) counts once.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "autograd/fp32_store.h"
#include "autograd/tape.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;

namespace {

struct Totals {
  int64_t bytes = 0, fp32_bytes = 0;
};

Totals saved_after_forward(StorePolicy& policy, const std::string& activation) {
  Tensor x = packrat::testing::random_tensor({8, 64}, 1).set_requires_grad();
  Tensor w;
  {
    TagScope parameters(MemTag::Parameter);
    w = packrat::testing::random_tensor({32, 64}, 2).set_requires_grad();
  }
  PolicyScope scope(policy);
  Tensor h = ops::activation(x, activation);  // relu saves its output h; linear saves h too
  Tensor y = ops::linear(h, w, Tensor());
  Totals t;
  for (const auto& r : policy.describe()) {
    t.bytes += r.bytes;
    t.fp32_bytes += r.fp32_bytes;
  }
  clear_tape();
  return t;
}

StorePolicySpec scheme(const std::string& name, std::map<std::string, std::string> options) {
  StorePolicySpec s;
  s.default_scheme = {name, std::move(options), "test"};
  return s;
}

}  // namespace

TEST(Fp32Baseline, CompressedPoliciesCountASharedBufferOnce) {
  for (const std::string act : {"relu", "gelu", "sigmoid"}) {
    Fp32Policy fp32;
    const Totals baseline = saved_after_forward(fp32, act);
    EXPECT_EQ(baseline.bytes, baseline.fp32_bytes) << act;
    for (auto spec : {scheme("actnn", {{"bits", "2"}}), scheme("mixed", {{"preset", "2/4@0.5"}})}) {
      RulePolicy policy(spec);
      const Totals t = saved_after_forward(policy, act);
      EXPECT_EQ(t.fp32_bytes, baseline.bytes) << act << " " << spec.default_scheme.scheme;
      EXPECT_LT(t.bytes, baseline.bytes) << act;
    }
    StorePolicySpec fewbit;
    fewbit.rules.push_back({{"relu", "gelu", "sigmoid"}, {}, {"fewbit", {{"bits", "2"}}, "test"}});
    RulePolicy policy(fewbit);
    EXPECT_EQ(saved_after_forward(policy, act).fp32_bytes, baseline.bytes) << act << " fewbit";
  }
}
