// The mixed store's mix_prob schedule through the trainer: the trainer reports its progress
// (step / (epochs x steps per epoch)) before every step, so a linear schedule from 0 to 1 over
// three epochs holds more mix-width buckets at each epoch's first step: 0, 1/3, 2/3 of them.
// Without the trainer's progress the schedule stayed at its start (issue 14).
#include <gtest/gtest.h>

#include <filesystem>

#include "experiments/lib/run.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

TEST(MixSchedule, TrainerMovesTheRealisedMixProbabilityAsScheduled) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const fs::path data = make_idx_dataset("mix_schedule", 64, 16);
  auto run = [&](const std::string& scheme, int epochs) {
    const std::vector<std::string> sets = {"saved_tensors.rules=[]", "saved_tensors.default=" + scheme,
                                           "train.epochs=" + std::to_string(epochs), "train.steps_per_epoch=2"};
    return run_training(tiny_config(data, temp_dir("mix_schedule"), sets), quiet);
  };
  // The saved bytes at each epoch's first step, against the constant stores at either end.
  const RunResult r = run("{scheme: mixed, base_bits: 2, mix_bits: 4, mix_prob: 0, mix_prob_end: 1}", 3);
  const RunResult lo = run("{scheme: mixed, base_bits: 2, mix_bits: 4, mix_prob: 0}", 1);
  const RunResult hi = run("{scheme: mixed, base_bits: 2, mix_bits: 4, mix_prob: 1}", 1);
  ASSERT_EQ(r.epochs.size(), 3u);
  const double b0 = static_cast<double>(lo.epochs[0].saved_bytes), b1 = static_cast<double>(hi.epochs[0].saved_bytes);
  ASSERT_GT(b1, b0);
  EXPECT_EQ(r.epochs[0].saved_bytes, lo.epochs[0].saved_bytes);  // progress 0: the start probability
  for (size_t e = 1; e < 3; ++e) {
    const double realised = (static_cast<double>(r.epochs[e].saved_bytes) - b0) / (b1 - b0);
    EXPECT_NEAR(realised, static_cast<double>(e) / 3.0, 0.05) << "epoch " << e + 1;
  }
}
