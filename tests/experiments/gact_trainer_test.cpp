// GACT through the trainer: the gradient's sampling variance, against which the compression
// variance warning is judged, is fed from every training step whichever the estimator (it was
// fed only at measured refreshes, so under the analytic estimator the warning could not fire).
#include <gtest/gtest.h>

#include <filesystem>

#include "experiments/lib/checkpoint.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

TEST(GactTrainer, WarningIsFedFromEveryStepUnderBothEstimators) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const fs::path data = make_idx_dataset("gact_warning", 64, 16);
  for (const char* estimator : {"analytic", "measured"}) {
    SCOPED_TRACE(estimator);
    // warn_ratio 0: any predicted compression variance warns once a sampling variance exists.
    const std::vector<std::string> sets = {
        "saved_tensors.rules=[]", "train.epochs=1", "train.steps_per_epoch=3",
        std::string("saved_tensors.default={scheme: gact, avg_bits: 2, adapt_interval: 1, tensors_per_refresh: 2, "
                    "warn_ratio: 0, estimator: ") + estimator + "}"};
    const fs::path out = temp_dir(std::string("gact_warning_") + estimator);
    run_training(tiny_config(data, out, sets), quiet);
    const SafetensorsFile f = read_safetensors(checkpoint_path(out.string(), 1));
    ASSERT_TRUE(f.find("gact.0.grad_count"));
    EXPECT_EQ(f.find("gact.0.grad_count")->data<int64_t>()[0], 3);  // one gradient per training step
    EXPECT_EQ(f.find("gact.0.warned")->data<int64_t>()[0], 1);
  }
}
