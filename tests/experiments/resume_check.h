#pragma once
// A two-epoch run against the same run stopped after its first epoch and resumed (test support):
// the resumed epoch's loss and every tensor of the last checkpoint must be bit-identical.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "experiments/lib/checkpoint.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "tests/experiments/tiny_config.h"

namespace packrat::testing {

struct ResumedRuns {
  SafetensorsFile straight, resumed;  // the epoch-2 checkpoints
};

// tiny_config(data, <dir>, sets) trained 2 epochs straight, and 1 + 1 with --resume; `name` keeps
// the run directories apart.
inline ResumedRuns expect_resume_bit_identical(const std::filesystem::path& data, const std::vector<std::string>& sets,
                                               const std::string& name) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const auto straight = temp_dir(name + "_straight"), resumed = temp_dir(name + "_resumed");
  const RunResult a = run_training(tiny_config(data, straight, sets), quiet);
  RunOptions first = quiet;
  first.stop_after_epoch = 1;
  run_training(tiny_config(data, resumed, sets), first);
  RunOptions again = quiet;
  again.resume = true;
  const RunResult b = run_training(tiny_config(data, resumed, sets), again);
  ResumedRuns r{read_safetensors(checkpoint_path(straight.string(), 2)),
                read_safetensors(checkpoint_path(resumed.string(), 2))};
  EXPECT_EQ(b.epochs.size(), 1u) << name;
  if (b.epochs.size() == 1 && a.epochs.size() == 2) {
    EXPECT_EQ(a.epochs[1].train_loss, b.epochs[0].train_loss) << name;
  }
  EXPECT_EQ(r.straight.tensors.size(), r.resumed.tensors.size()) << name;
  for (const auto& [tensor, x] : r.straight.tensors) {
    const Tensor* y = r.resumed.find(tensor);
    if (!y) {
      ADD_FAILURE() << name << ": " << tensor << " missing after resume";
      continue;
    }
    EXPECT_EQ(x.dtype(), y->dtype()) << name << ": " << tensor;
    if (x.nbytes() != y->nbytes()) {
      ADD_FAILURE() << name << ": " << tensor << " changed size after resume";
      continue;
    }
    EXPECT_EQ(std::memcmp(x.raw(), y->raw(), x.nbytes()), 0) << name << ": " << tensor << " differs after resume";
  }
  return r;
}

}  // namespace packrat::testing
