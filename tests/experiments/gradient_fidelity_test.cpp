// Gradient fidelity (experiments/lib/gradient_fidelity.h) on a network whose answer is known:
// Flatten -> Linear -> ReLU -> Linear. Each Linear's weight gradient is linear in its saved
// input, the ReLU keeps an exact mask and the loss keeps FP32 probabilities, so the gradient
// under stochastic rounding has exactly the FP32 gradient as its expectation, and the gradient
// under round-to-nearest is a fixed, different vector.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/train_loop.h"
#include "layers/activation.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "quant/group/gact_store.h"
#include "quant/policy/rule_policy.h"

using namespace packrat;

namespace {

std::shared_ptr<Sequential> mlp() {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(48, 32, true, 11));
  m->add(std::make_shared<Activation>("relu"));
  m->add(std::make_shared<Linear>(32, 10, true, 12));
  return m;
}

StorePolicySpec actnn(int bits, const std::string& rounding) {
  StorePolicySpec s;
  s.default_scheme.scheme = "actnn";
  s.default_scheme.options = {{"bits", std::to_string(bits)}, {"rounding", rounding}};
  s.seed = 5;
  return s;
}

struct Fixture {
  std::shared_ptr<Sequential> model = mlp();
  SyntheticBatch batch = synthetic_batch(32, 3, 4, 4, 10, 9);  // (32, 3, 4, 4): 48 features
  RulePolicy fp32{StorePolicySpec{}};
  FidelityReport run(const StorePolicySpec& spec, int64_t draws) {
    RulePolicy p(spec);
    return measure_gradient_fidelity(*model, fp32, p, batch.images, batch.labels, draws);
  }
};

}  // namespace

// The threshold comes from the measured variance: bias_z standardises ||mean - g||^2 by its mean
// V/N and standard deviation sqrt(2 sum var_i^2)/N under "unbiased", so an unbiased scheme stays
// within a few units (|z| < 4: a 1-in-15000 event for a normal statistic) and a biased one does
// not.
TEST(GradientFidelity, StochasticRoundingIsUnbiasedNearestIsNot) {
  Fixture f;
  const FidelityReport sr = f.run(actnn(2, "stochastic"), 64);
  ASSERT_EQ(sr.tensors.size(), 4u);  // two weights, two biases
  for (const auto& t : sr.tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_LT(std::abs(t.bias_z), 4.0);
  }
  EXPECT_LT(std::abs(sr.total.bias_z), 4.0);
  // The noise is real: the first layer's weight gradient varies from draw to draw.
  EXPECT_GT(sr.tensors[0].rel_variance, 1e-4);
  EXPECT_LT(sr.total.cosine, 1.0);
  EXPECT_GT(sr.total.cosine, 0.5);

  const FidelityReport rn = f.run(actnn(2, "nearest"), 8);
  EXPECT_EQ(rn.tensors[0].rel_variance, 0.0) << "round-to-nearest draws are all the same";
  EXPECT_GT(rn.tensors[0].rel_bias, 1e-3);
  EXPECT_TRUE(std::isinf(rn.tensors[0].bias_z) && rn.tensors[0].bias_z > 0);
  // Stochastic rounding's mean over 64 draws is closer to FP32 than nearest's fixed answer.
  EXPECT_LT(sr.total.rel_bias, rn.total.rel_bias);
  // The last layer's bias gradient needs no saved input: exact under any scheme.
  EXPECT_EQ(rn.tensors[3].rel_bias, 0.0);
  EXPECT_DOUBLE_EQ(rn.tensors[3].cosine, 1.0);
}

TEST(GradientFidelity, Fp32SchemeIsExactAndReportNamesParameters) {
  Fixture f;
  const FidelityReport r = f.run(StorePolicySpec{}, 3);
  for (const auto& t : r.tensors) {
    EXPECT_EQ(t.rel_bias, 0.0) << t.name;
    EXPECT_EQ(t.rel_variance, 0.0) << t.name;
    EXPECT_NEAR(t.cosine, 1.0, 1e-12) << t.name;
    EXPECT_EQ(t.bias_z, 0.0) << t.name;
  }
  EXPECT_EQ(r.tensors[0].name, "1.weight");
  EXPECT_EQ(r.tensors[0].numel, 32 * 48);
  EXPECT_EQ(r.total.numel, 32 * 48 + 32 + 10 * 32 + 10);
  const Json j = r.json();
  EXPECT_EQ(j.at("tensors").size(), 4u);
  EXPECT_NE(r.table().find("1.weight"), std::string::npos);
}

// With dropout in the model every draw sees the reference's masks: FP32 storage is still exact
// (without the rewind each draw dropped other units, and FP32 against FP32 had cosines near 0.4).
TEST(GradientFidelity, DropoutMasksAreTheSameInEveryDraw) {
  Fixture f;
  f.model->add(std::make_shared<Dropout>(0.5f));
  const FidelityReport r = f.run(StorePolicySpec{}, 3);
  for (const auto& t : r.tensors) {
    EXPECT_EQ(t.rel_variance, 0.0) << t.name;
    EXPECT_NEAR(t.cosine, 1.0, 1e-12) << t.name;
  }
}

TEST(GradientFidelity, NeedsTwoDraws) {
  Fixture f;
  EXPECT_THROW(f.run(actnn(2, "stochastic"), 1), Error);
}

// GACT allocates its bits before the draws: from the measured batch, or from another when asked
// (the memory plan's variance check: bits from a batch's first kFirstEstimateBatch samples, drawn
// on the next batch, as training draws on the batches after a refresh). Its table holds the sizes
// of the tensors it estimated.
TEST(GradientFidelity, GactEstimatesOnTheBatchItIsGiven) {
  Fixture f;
  StorePolicySpec gact;
  gact.default_scheme.scheme = "gact-L1";
  gact.seed = 5;
  auto first_tensor_numel = [&](const LabelledBatch* estimate_on) {
    RulePolicy p(gact);
    measure_gradient_fidelity(*f.model, f.fp32, p, f.batch.images, f.batch.labels, 2, 0, 0, estimate_on);
    const std::vector<GactStore*> stores = find_gact_stores(p);
    EXPECT_EQ(stores.size(), 1u);
    EXPECT_EQ(stores.front()->refreshes(), 1);
    return stores.front()->tensors().front().numel;
  };
  EXPECT_EQ(first_tensor_numel(nullptr), 32 * 48) << "the first Linear's input, all 32 samples";
  const LabelledBatch four{ops::narrow(f.batch.images, 0, 0, 4), ops::narrow(f.batch.labels, 0, 0, 4)};
  EXPECT_EQ(first_tensor_numel(&four), 4 * 48);
}
