// Hostile inputs to the trainer (issue 14): each must end in packrat::Error (exit code 2) with a
// message naming what is wrong and where, before any result is lost or an epoch is trained.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/cli.h"
#include "experiments/lib/metrics.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& fixture_data() {
  static const fs::path dir = make_idx_dataset("idx_bad", 32, 16);
  return dir;
}

const std::vector<std::string> kOneShortEpoch = {"train.epochs=1", "train.steps_per_epoch=1"};

std::vector<std::string> with(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

}  // namespace

// The trainer binary: a fresh run into a directory holding an earlier run is refused before
// train.log is opened; every file of the earlier run survives byte for byte.
TEST(BadInputs, AFreshRunLeavesAnEarlierRunsFilesAlone) {
  const fs::path out = temp_dir("bad_earlier_run");
  run_training(tiny_config(fixture_data(), out, kOneShortEpoch), quiet());
  write_text(out / "train.log", "the earlier run's log\n");
  const fs::path yaml = out.parent_path() / ("packrat_bad_earlier_" + std::to_string(::getpid()) + ".yaml");
  write_text(yaml, tiny_yaml(fixture_data(), out));
  std::map<std::string, std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) before[e.path().string()] = read_text(e.path());
  ASSERT_TRUE(before.count((out / "metrics.csv").string()));
  ASSERT_TRUE(before.count(checkpoint_path(out.string(), 1)));

  const std::string msg = message_of([&] {
    run_trainer(parse_trainer_args({"--config", yaml.string(), "--set", "train.epochs=1", "--set",
                                    "train.steps_per_epoch=1"}));
  });
  EXPECT_TRUE(contains(msg, "output.dir " + out.string() + " holds an earlier run")) << msg;
  EXPECT_TRUE(contains(msg, "metrics.csv")) << msg;
  EXPECT_TRUE(contains(msg, "--resume " + out.string())) << msg;
  EXPECT_TRUE(contains(msg, "--overwrite")) << msg;
  std::map<std::string, std::string> after;
  for (const auto& e : fs::recursive_directory_iterator(out))  // the trainer's lock file aside
    if (e.is_regular_file() && e.path().filename() != kLockFileName) after[e.path().string()] = read_text(e.path());
  EXPECT_EQ(after, before);
  // The library refuses the same way.
  EXPECT_TRUE(contains(message_of([&] { run_training(tiny_config(fixture_data(), out, kOneShortEpoch), quiet()); }),
                       "holds an earlier run"));
  // --overwrite excludes the measuring modes (but --gradient-fidelity, which writes into output.dir) and --resume.
  EXPECT_THROW(parse_trainer_args({"--config", "a.yaml", "--overwrite", "--benchmark", "2"}), Error);
  EXPECT_THROW(parse_trainer_args({"--resume", out.string(), "--overwrite"}), Error);
  EXPECT_NO_THROW(parse_trainer_args({"--config", "a.yaml", "--overwrite", "--gradient-fidelity", "2"}));
  fs::remove(yaml);
}

// Only metrics, a non-empty train.log and checkpoints make an earlier run: a directory with just
// a memory report (--memory-report-only) or an empty log is free to use.
TEST(BadInputs, WhatCountsAsAnEarlierRun) {
  const fs::path out = temp_dir("bad_what_counts");
  write_text(out / "memory_report.json", "{}");
  write_text(out / "train.log", "");
  EXPECT_TRUE(earlier_run_files(out.string()).empty());
  EXPECT_NO_THROW(prepare_output_dir(out.string(), false, false));
  write_text(out / "train.log", "x\n");
  EXPECT_EQ(earlier_run_files(out.string()), std::vector<std::string>{"train.log"});
  EXPECT_THROW(prepare_output_dir(out.string(), false, false), Error);
  EXPECT_NO_THROW(prepare_output_dir(out.string(), false, true));  // --overwrite removes it
  EXPECT_FALSE(fs::exists(out / "train.log"));
}

// Filesystem problems are found before the data is read or a step is trained, with the path.
TEST(BadInputs, OutputDirectoryProblemsNameThePathBeforeTraining) {
  const fs::path base = temp_dir("bad_output_dir");
  auto error = [&](const fs::path& out, const std::vector<std::string>& sets = {}, bool resume = false) {
    RunOptions o = quiet();
    o.resume = resume;
    // No data at /nonexistent: a message about the directory proves it was checked first.
    return message_of([&] { run_training(tiny_config("/nonexistent", out, with(kOneShortEpoch, sets)), o); });
  };
  write_text(base / "a_file", "x");
  std::string m = error(base / "a_file");
  EXPECT_TRUE(contains(m, (base / "a_file").string() + " is a file, not a directory")) << m;
  m = error(base / "a_file" / "sub");
  EXPECT_TRUE(contains(m, "cannot create the directory")) << m;
  m = error("/proc/packrat_cannot_write_here");
  EXPECT_TRUE(contains(m, "/proc/packrat_cannot_write_here")) << m;

  fs::create_directories(base / "ckpt_file");
  write_text(base / "ckpt_file" / "checkpoints", "x");
  m = error(base / "ckpt_file");
  EXPECT_TRUE(contains(m, (base / "ckpt_file" / "checkpoints").string() + " is a file, not a directory")) << m;

  const fs::path dir_ckpt = base / "ckpt_dir";
  fs::create_directories(checkpoint_path(dir_ckpt.string(), 1));
  m = error(dir_ckpt, {}, true);
  EXPECT_TRUE(contains(m, checkpoint_path(dir_ckpt.string(), 1) + " is not a regular file")) << m;

  // --memory-report-only writes there too: checked before its training step.
  const Config report = tiny_config("/nonexistent", base / "a_file");
  m = message_of([&] { memory_report_only(report); });
  EXPECT_TRUE(contains(m, (base / "a_file").string() + " is a file, not a directory")) << m;

  fs::create_directories(base / "empty_run");
  m = error(base / "empty_run", {}, true);
  EXPECT_TRUE(contains(m, "--resume " + (base / "empty_run").string() + ": no checkpoint")) << m;
}

// A NaN test loss ends the run with an error naming the epoch; the epoch's metrics row is
// written, no checkpoint of the diverged model is. (a mean of -3e38 in the test transforms makes the
// test inputs ~3e38: finite, but the network overflows on them.)
TEST(BadInputs, NonFiniteTestLossStopsTheRun) {
  const fs::path out = temp_dir("bad_nan_test_loss");
  const Config c = tiny_config(fixture_data(), out, with(kOneShortEpoch, {"data.test_transforms=[\"normalize(-3e38 / 1)\"]"}));
  const std::string m = message_of([&] { run_training(c, quiet()); });
  EXPECT_TRUE(contains(m, "epoch 1: the test loss is")) << m;
  EXPECT_TRUE(contains(m, "not finite")) << m;
  EXPECT_TRUE(fs::exists(out / "metrics.csv"));
  EXPECT_FALSE(latest_checkpoint(out.string()).has_value());
}

TEST(BadInputs, TestImagesOfAnotherSizeAndWrongInChannels) {
  std::string m = message_of([&] {
    run_training(tiny_config(fixture_data(), temp_dir("bad_test_size"), with(kOneShortEpoch, {"data.test_transforms=[\"resize(8)\"]"})),
                 quiet());
  });
  EXPECT_TRUE(contains(m, "t10k-images-idx3-ubyte.gz) are (1, 8, 8) but the training images")) << m;
  m = message_of([&] {
    run_training(tiny_config(fixture_data(), temp_dir("bad_in_channels"), with(kOneShortEpoch, {"model.in_channels=3"})),
                 quiet());
  });
  EXPECT_TRUE(contains(m, "model.in_channels is 3, but the mnist images have 1 channel(s)")) << m;
  // The synthetic modes check it too.
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"model.in_channels=3"});
  EXPECT_TRUE(contains(message_of([&] { synthetic_input_spec(c); }), "model.in_channels is 3"));
  EXPECT_NO_THROW(synthetic_input_spec(tiny_config("/nonexistent", "/tmp/unused", {"model.in_channels=1"})));
}

// threads far above the processors (threads: 1024 on 2 cores ran 50x slower) is refused.
TEST(BadInputs, FarTooManyThreadsAreRefused) {
  const int procs = omp_get_num_procs();
  const int64_t too_many = int64_t{kMaxThreadsPerProcessor} * procs + 1;
  if (too_many > 1024) GTEST_SKIP() << "more processors than the config's threads range can exceed";
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"threads=" + std::to_string(too_many)});
  const int before = omp_get_max_threads();
  const std::string m = message_of([&] { apply_process_settings(c); });
  EXPECT_TRUE(contains(m, "threads is " + std::to_string(too_many))) << m;
  EXPECT_TRUE(contains(m, "threads: 0")) << m;
  EXPECT_EQ(omp_get_max_threads(), before);
}

// device: cuda is a config any build reads; whether it can train is decided, with the reason,
// before anything is built: CUDA not compiled in, or no GPU visible. With a GPU it trains.
TEST(BadInputs, ADeviceThatCannotTrainSaysWhy) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"device=cuda"});
  EXPECT_EQ(c.device, "cuda:0");
  const std::string m = message_of([&] { apply_process_settings(c); });
#if !PACKRAT_HAVE_CUDA
  EXPECT_TRUE(contains(m, "device cuda:0: ") && contains(m, "built without CUDA")) << m;
#else
  if (available_backends().size() == 1) {
    EXPECT_TRUE(contains(m, "device cuda:0: ") && contains(m, "no GPU is visible")) << m;
  } else {
    EXPECT_EQ(m, "(no error)") << "the CUDA backend is complete: a GPU trains";
  }
#endif
  EXPECT_TRUE(contains(message_of([] { tiny_config("/nonexistent", "/tmp/unused", {"device=tpu"}); }), "cpu, cuda or cuda:N"));
}

// --find-max-batch 9000000000G wrapped around to a negative number and started a training run.
TEST(BadInputs, ByteSizesThatOverflowAreRefused) {
  for (const char* s : {"9000000000G", "9223372036854775807K", "99999999999999999999"}) {
    const std::string m = message_of([&] { parse_trainer_args({"--config", "a.yaml", "--find-max-batch", s}); });
    EXPECT_TRUE(contains(m, "--find-max-batch")) << s << ": " << m;
    EXPECT_TRUE(contains(m, s)) << m;
  }
  EXPECT_EQ(parse_byte_size("4294967296G", "f"), int64_t{1} << 62);  // the largest accepted
  EXPECT_THROW(parse_byte_size("4294967297G", "f"), Error);
}

// A damaged metrics.csv ended a resume in an internal std::stoll error; a directory given as the
// config read as an empty config.
TEST(BadInputs, DamagedMetricsAndADirectoryAsConfig) {
  const fs::path out = temp_dir("bad_metrics");
  {
    MetricsWriter w(out.string());
    EpochMetrics m;
    m.epoch = 1;
    w.append(m);
  }
  std::ofstream(out / "metrics.csv", std::ios::app) << "garbage,line\n";
  MetricsWriter w(out.string());
  const std::string m = message_of([&] { w.truncate_after(1); });
  EXPECT_TRUE(contains(m, (out / "metrics.csv").string() + ": line 3 is not a metrics row")) << m;
  EXPECT_TRUE(contains(message_of([&] { load_config(out.string()); }), "is a directory, not a config file"));
}
