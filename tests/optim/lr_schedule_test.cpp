#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "optim/lr_schedule.h"

using namespace packrat;

TEST(Schedule, ConstantAndStepDecay) {
  LrSchedule constant(LrScheduleConfig{.kind = "constant", .base_lr = 0.2, .epochs = 5});
  EXPECT_DOUBLE_EQ(constant.lr(4, 0), 0.2);
  LrSchedule step(LrScheduleConfig{.kind = "step", .base_lr = 0.1, .epochs = 10, .steps_per_epoch = 5,
                                   .step_size = 3, .gamma = 0.5});
  EXPECT_DOUBLE_EQ(step.lr(0, 0), 0.1);
  EXPECT_DOUBLE_EQ(step.lr(2, 4), 0.1);
  EXPECT_DOUBLE_EQ(step.lr(3, 0), 0.05);
  EXPECT_DOUBLE_EQ(step.lr(6, 2), 0.025);
}

TEST(Schedule, MultiStepDecaysAtMilestones) {
  LrSchedule s(LrScheduleConfig{.kind = "multistep", .base_lr = 0.1, .epochs = 200, .milestones = {100, 150}});
  EXPECT_NEAR(s.lr(99, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(100, 0), 0.01, 1e-12);
  EXPECT_NEAR(s.lr(149, 0), 0.01, 1e-12);
  EXPECT_NEAR(s.lr(150, 0), 0.001, 1e-12);
}

TEST(Schedule, CosineGoesFromBaseToMinimum) {
  LrSchedule s(LrScheduleConfig{.kind = "cosine", .base_lr = 0.1, .epochs = 10, .steps_per_epoch = 4, .min_lr = 0.001});
  EXPECT_NEAR(s.lr(0, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(5, 0), 0.001 + 0.099 * 0.5, 1e-12);  // half way
  EXPECT_NEAR(s.lr(2, 2), 0.001 + 0.099 * 0.5 * (1 + std::cos(M_PI * 2.5 / 10)), 1e-12);  // moves within an epoch
  EXPECT_NEAR(s.lr(10, 0), 0.001, 1e-12);
  EXPECT_NEAR(s.lr(12, 0), 0.001, 1e-12);  // clamped after the run
}

TEST(Schedule, LinearWarmupThenCosine) {
  LrSchedule s(LrScheduleConfig{.kind = "cosine", .base_lr = 0.4, .epochs = 6, .steps_per_epoch = 4, .warmup_epochs = 2});
  EXPECT_NEAR(s.lr(0, 0), 0.4 / 8, 1e-12);  // first step is not zero
  EXPECT_NEAR(s.lr(0, 3), 0.4 * 4 / 8, 1e-12);
  EXPECT_NEAR(s.lr(1, 3), 0.4, 1e-12);
  EXPECT_NEAR(s.lr(2, 0), 0.4, 1e-12);  // cosine starts at the base after warmup
  EXPECT_NEAR(s.lr(4, 0), 0.2, 1e-12);  // half way through the remaining 4 epochs
  EXPECT_NEAR(s.lr(6, 0), 0.0, 1e-12);
}

TEST(Schedule, WarmupThenStepKeepsAbsoluteEpochs) {
  LrSchedule s(LrScheduleConfig{.kind = "step", .base_lr = 0.1, .epochs = 10, .steps_per_epoch = 2, .step_size = 2,
                                .gamma = 0.1, .warmup_epochs = 1});
  EXPECT_NEAR(s.lr(0, 0), 0.05, 1e-12);
  EXPECT_NEAR(s.lr(0, 1), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(1, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(2, 0), 0.01, 1e-12);
}

TEST(Schedule, BadConfigsThrow) {
  EXPECT_THROW(LrSchedule(LrScheduleConfig{.kind = "exponential"}), Error);
  EXPECT_THROW(LrSchedule(LrScheduleConfig{.kind = "cosine", .epochs = 2, .warmup_epochs = 3}), Error);
  EXPECT_THROW(LrSchedule(LrScheduleConfig{.kind = "step", .step_size = 0}), Error);
  EXPECT_THROW(LrSchedule(LrScheduleConfig{.kind = "cosine", .epochs = 0}), Error);
}

// A warm-up shorter than one step (0.1 epochs of 2 steps = 0.2 steps) ends at the first step:
// the learning rate is capped at the base, not multiplied by 1 / 0.2 = 5.
TEST(Schedule, WarmupShorterThanAStepIsCappedAtTheBase) {
  for (const char* kind : {"constant", "cosine", "step"}) {
    LrSchedule s(LrScheduleConfig{.kind = kind, .base_lr = 0.1, .epochs = 4, .steps_per_epoch = 2, .warmup_epochs = 0.1});
    EXPECT_NEAR(s.lr(0, 0), 0.1, 1e-12) << kind;
    for (int64_t e = 0; e < 4; ++e)
      for (int64_t i = 0; i < 2; ++i) EXPECT_LE(s.lr(e, i), 0.1 + 1e-12) << kind << " epoch " << e << " step " << i;
  }
}
