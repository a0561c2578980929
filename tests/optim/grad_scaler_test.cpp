// Loss scaling for fp16 (optim/grad_scaler.h): PyTorch GradScaler's schedule, exact unscaling, and a training
// step with an inf gradient skipped while the run goes on.
#include "optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/fp32_store.h"
#include "core/autograd_meta.h"
#include "core/backend.h"
#include "experiments/lib/train_loop.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/errors.h"

using namespace packrat;

TEST(GradScaler, FollowsPyTorchsScheduleAndRefusesAnImpossibleState) {
  GradScaler s(GradScalerOptions{65536.0, 2.0, 0.5, 3});
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);  // the third good step in a row: growth
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(true);  // an inf: back off, the good-step count starts again
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped(), 1);
  s.restore(1024.0, 2, 7);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.skipped(), 7);
  EXPECT_NE(packrat::testing::message_of([&] { s.restore(std::numeric_limits<double>::infinity(), 0, 0); }).find("scale"),
            std::string::npos);
  EXPECT_NE(packrat::testing::message_of([&] { s.restore(8.0, 3, 0); }).find("growth interval"), std::string::npos);
}

namespace {

struct Trainee {
  std::shared_ptr<Module> model = make_model(ModelSpec{"resnet20", "cifar", "", 3, 10, 0});
  SGD opt{model->named_parameters(), SgdOptions{0.05, 0.9}};
  Fp32Policy policy;
  SyntheticBatch batch = synthetic_batch(4, 3, 16, 16, 10, 1);

  StepResult step(int64_t i, GradScaler* scaler, bool inject_inf = false) {
    StepOptions o;
    o.scaler = scaler;
    if (inject_inf)
      o.after_backward = [](Module& m) {
        Tensor g = m.parameters().front().grad();
        Tensor inf = Tensor::full(g.shape(), std::numeric_limits<float>::infinity());
        m.parameters().front().autograd_meta()->grad = inf.to_layout(g.layout());
      };
    return train_step(*model, opt, policy, batch.images, batch.labels, i, o);
  }
  std::vector<float> weights() const { return model->parameters().front().to_vector(); }
};

}  // namespace

TEST(GradScaler, AStepWithAnInfGradientIsSkippedTheScaleHalvesAndTheRunGoesOn) {
  Trainee scaled, plain;
  GradScaler scaler;
  const std::vector<float> before = scaled.weights();
  const StepResult bad = scaled.step(0, &scaler, /*inject_inf=*/true);
  EXPECT_TRUE(bad.skipped);
  EXPECT_EQ(scaled.weights(), before) << "a skipped step must not touch the parameters";
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.skipped(), 1);
  for (const Tensor& p : scaled.model->parameters()) EXPECT_FALSE(p.grad().defined());

  // The next steps update; scaling by a power of two and back is exact, so they match a run without scaling
  // bit for bit.
  for (int64_t i = 0; i < 2; ++i) {
    const StepResult a = scaled.step(1 + i, &scaler), b = plain.step(i, nullptr);
    EXPECT_FALSE(a.skipped);
    EXPECT_EQ(a.loss, b.loss);
  }
  EXPECT_EQ(scaled.weights(), plain.weights());
  EXPECT_EQ(scaler.growth_tracker(), 2);
}
