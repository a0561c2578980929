#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/fp32_store.h"
#include "autograd/pointwise.h"
#include "core/error.h"
#include "quant/policy/rule_policy.h"

using namespace packrat;

namespace {

SaveRequest request(std::string_view op, std::string name, Need need = Need::Value, const Pointwise* fn = nullptr) {
  SaveRequest r;
  r.op = op;
  r.name = std::move(name);
  r.need = need;
  r.fn = fn;
  return r;
}

StoreRule rule(std::vector<std::string> ops, std::vector<std::string> layers, std::string where) {
  StoreRule r;
  r.ops = std::move(ops);
  r.layers = std::move(layers);
  r.spec.scheme = "fp32";
  r.spec.where = std::move(where);
  return r;
}

}  // namespace

TEST(RulePolicy, GlobMatchesDottedLayerNames) {
  EXPECT_TRUE(glob_match("layer1.*", "layer1.0.conv1"));
  EXPECT_FALSE(glob_match("layer1.*", "layer2.0.conv1"));
  EXPECT_TRUE(glob_match("*.conv?", "layer3.1.conv2"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("layer[12].*.bn1", "layer2.0.bn1"));
  EXPECT_FALSE(glob_match("layer[12].*.bn1", "layer3.0.bn1"));
}

TEST(RulePolicy, FirstMatchingRuleWins) {
  StorePolicySpec spec;
  spec.rules.push_back(rule({"gelu"}, {}, "rules[0]"));
  spec.rules.push_back(rule({}, {"layer1.*"}, "rules[1]"));
  spec.rules.push_back(rule({"conv2d"}, {"layer1.*", "layer2.*"}, "rules[2]"));
  RulePolicy p(spec);
  EXPECT_EQ(p.match(request("gelu", "layer1.0")), 0);
  EXPECT_EQ(p.match(request("conv2d", "layer1.0.conv1")), 1);
  EXPECT_EQ(p.match(request("conv2d", "layer2.0.conv1")), 2);
  EXPECT_EQ(p.match(request("conv2d", "layer3.0.conv1")), -1);
  EXPECT_EQ(p.match(request("linear", "fc")), -1);
  // Activations also match by their function's name whatever the op string is.
  EXPECT_EQ(p.match(request("activation", "stem", Need::Derivative, &pointwise_by_name("gelu"))), 0);
  // One store per rule plus the default (and the FP32 last resort).
  EXPECT_EQ(p.stores().size(), 5u);
  EXPECT_EQ(&p.store_for(request("gelu", "x")), p.stores()[1]);
  EXPECT_EQ(&p.store_for(request("conv2d", "layer2.1.conv2")), p.stores()[3]);
  EXPECT_EQ(&p.store_for(request("linear", "fc")), p.stores()[0]);
}

namespace {
// A store that serves only derivative requests, to test the fall-back.
class DerivativeOnly : public Fp32Store {
 public:
  bool accepts(const SaveRequest& r) const override { return r.need == Need::Derivative; }
};
}  // namespace

TEST(RulePolicy, SavesThroughTheMatchedStoreAndDescribes) {
  StorePolicySpec spec;
  spec.rules.push_back(rule({"conv2d"}, {}, "rules[0]"));
  RulePolicy p(spec);
  Tensor x = Tensor::full({4, 8}, 1.0f);
  SavedHandle h;
  {
    PolicyScope scope(p);
    h = save_for_backward(x, request("conv2d", "layer1.0.conv1"));
  }
  EXPECT_EQ(h.store, p.stores()[1]);
  auto records = p.describe();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].layer, "layer1.0.conv1");
  EXPECT_EQ(records[0].bytes, 128);
  h.store->release(h);
  EXPECT_TRUE(p.describe().empty());
}

TEST(RulePolicy, RefusedRequestsFallBackToTheDefault) {
  register_scheme("test_derivative_only", [](SchemeOptions&) { return std::make_unique<DerivativeOnly>(); });
  StorePolicySpec spec;
  StoreRule r = rule({"gelu", "conv2d"}, {}, "rules[0]");
  r.spec.scheme = "test_derivative_only";
  spec.rules.push_back(r);
  RulePolicy p(spec);
  const Pointwise* gelu = &pointwise_by_name("gelu");
  EXPECT_EQ(&p.store_for(request("gelu", "a", Need::Derivative, gelu)), p.stores()[1]);
  EXPECT_EQ(&p.store_for(request("conv2d", "a", Need::Value)), p.stores()[0]);  // refused: the default
  // A default that refuses too: the FP32 last resort.
  StorePolicySpec spec2;
  spec2.default_scheme.scheme = "test_derivative_only";
  RulePolicy p2(spec2);
  EXPECT_EQ(p2.store_for(request("conv2d", "a")).scheme(), "fp32");
  EXPECT_EQ(&p2.store_for(request("conv2d", "a")), p2.stores().back());
}

TEST(RulePolicy, UnknownSchemeListsTheAvailableOnes) {
  StorePolicySpec spec;
  spec.rules.push_back(rule({"gelu"}, {}, "saved_tensors.rules[0] (line 12)"));
  spec.rules[0].spec.scheme = "lz4";
  try {
    RulePolicy p(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("saved_tensors.rules[0] (line 12)"), std::string::npos) << m;
    EXPECT_NE(m.find("unknown scheme 'lz4'"), std::string::npos) << m;
    EXPECT_NE(m.find("fp32"), std::string::npos) << m;
  }
}

TEST(RulePolicy, UnusedOptionIsAnError) {
  StorePolicySpec spec;
  spec.default_scheme.options["bits"] = "4";
  spec.default_scheme.where = "saved_tensors.default (line 3)";
  try {
    RulePolicy p(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved_tensors.default (line 3): unknown key 'bits'"), std::string::npos) << e.what();
  }
}

TEST(RulePolicy, FewbitRuleServesActivationsOnly) {
  StorePolicySpec spec;
  StoreRule r = rule({"gelu"}, {}, "saved_tensors.rules[0] (line 5)");
  r.spec.scheme = "fewbit";
  r.spec.options["bits"] = "3";
  spec.rules.push_back(r);
  RulePolicy p(spec);
  const Pointwise* gelu = &pointwise_by_name("gelu");
  EXPECT_EQ(p.store_for(request("gelu", "layer1.0", Need::Derivative, gelu)).scheme(), "fewbit");
  // The few-bit store does not take values: a conv input matched by op falls back to the default.
  StorePolicySpec spec2 = spec;
  spec2.rules[0].ops = {"gelu", "conv2d"};
  RulePolicy p2(spec2);
  EXPECT_EQ(p2.store_for(request("conv2d", "layer1.0.conv1", Need::Value)).scheme(), "fp32");
  // Its options are checked with the rule's position.
  spec.rules[0].spec.options["bits"] = "9";
  try {
    RulePolicy bad(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved_tensors.rules[0] (line 5)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bits"), std::string::npos) << e.what();
  }
}

TEST(RulePolicy, ActnnDefaultGetsTheRunSeedAndServesValues) {
  StorePolicySpec spec;
  spec.default_scheme.scheme = "actnn";
  spec.default_scheme.options["bits"] = "4";
  spec.seed = 1234;
  RulePolicy p(spec);
  EXPECT_EQ(p.store_for(request("conv2d", "layer1.0.conv1")).scheme(), "actnn");
  for (const char* s : {"fp32", "fewbit", "actnn", "gact", "mixed", "deterministic"}) {
    const auto all = available_schemes();
    EXPECT_NE(std::find(all.begin(), all.end(), s), all.end()) << s;
  }
  // A seed written in the config wins over the run seed; a bad one is reported.
  spec.default_scheme.options["seed"] = "-1";
  EXPECT_THROW(RulePolicy bad(spec), Error);
}
