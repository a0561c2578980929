#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/cli.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/train_loop.h"
#include "experiments/lib/trainer_main.h"
#include "quant/group/gact_store.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& fixture_data() {
  static const fs::path dir = make_idx_dataset("idx64", 64, 32);
  return dir;
}

}  // namespace

TEST(Trainer, ResumeIsBitIdentical) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const fs::path straight = temp_dir("straight"), resumed = temp_dir("resumed");
  const RunResult a = run_training(tiny_config(fixture_data(), straight), quiet);
  ASSERT_EQ(a.epochs.size(), 2u);

  RunOptions first = quiet;
  first.stop_after_epoch = 1;
  const RunResult b1 = run_training(tiny_config(fixture_data(), resumed), first);
  ASSERT_EQ(b1.epochs.size(), 1u);
  EXPECT_TRUE(fs::exists(checkpoint_path(resumed.string(), 1)));
  RunOptions again = quiet;
  again.resume = true;
  const RunResult b2 = run_training(tiny_config(fixture_data(), resumed), again);
  EXPECT_EQ(b2.start_epoch, 1);
  ASSERT_EQ(b2.epochs.size(), 1u);

  const SafetensorsFile fa = read_safetensors(checkpoint_path(straight.string(), 2));
  const SafetensorsFile fb = read_safetensors(checkpoint_path(resumed.string(), 2));
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const Tensor& x = fa.tensors[i].second;
    const Tensor* y = fb.find(fa.tensors[i].first);
    ASSERT_TRUE(y) << fa.tensors[i].first;
    ASSERT_EQ(x.nbytes(), y->nbytes());
    EXPECT_EQ(std::memcmp(x.raw(), y->raw(), x.nbytes()), 0) << fa.tensors[i].first << " differs after resume";
  }
  EXPECT_EQ(a.epochs[1].train_loss, b2.epochs[0].train_loss);
  EXPECT_EQ(a.epochs[1].test_acc, b2.epochs[0].test_acc);
  // The resumed run's metrics files hold both epochs, once each.
  const std::string csv = read_text(resumed / "metrics.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
}

// GACT's adaptive state (sensitivities, bits, refresh timing, round-robin position, noise
// salts, sampling variance) is in the checkpoint: 2 epochs straight and 1 + resume + 1 give
// byte-identical checkpoints. 3 steps per epoch with a refresh every 2 steps: the resumed run
// must refresh at step 4 (not at its first step, 3) and quantize step 3 with the bits of step 2;
// 4 tensors re-measured per refresh (which also keeps the test fast): it must continue the
// round robin where it stopped.
TEST(Trainer, GactResumeIsBitIdentical) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const std::vector<std::string> gact = {"saved_tensors.rules=[]", "train.steps_per_epoch=3",
                                         "saved_tensors.default={scheme: gact, avg_bits: 3, adapt_interval: 2, tensors_per_refresh: 4}"};
  const fs::path straight = temp_dir("gact_straight"), resumed = temp_dir("gact_resumed");
  const RunResult a = run_training(tiny_config(fixture_data(), straight, gact), quiet);
  ASSERT_EQ(a.epochs.size(), 2u);

  RunOptions first = quiet;
  first.stop_after_epoch = 1;
  run_training(tiny_config(fixture_data(), resumed, gact), first);
  RunOptions again = quiet;
  again.resume = true;
  const RunResult b2 = run_training(tiny_config(fixture_data(), resumed, gact), again);
  ASSERT_EQ(b2.start_epoch, 1);
  ASSERT_EQ(b2.epochs.size(), 1u);

  const SafetensorsFile fa = read_safetensors(checkpoint_path(straight.string(), 2));
  const SafetensorsFile fb = read_safetensors(checkpoint_path(resumed.string(), 2));
  ASSERT_TRUE(fa.find("gact.0.sensitivity"));
  ASSERT_TRUE(fa.find("gact.0.bits"));
  EXPECT_EQ(fa.find("gact.0.refreshes")->data<int64_t>()[0], 3);  // steps 0, 2, 4
  EXPECT_EQ(fa.find("gact.0.round_robin")->data<int64_t>()[0], 12 % fa.find("gact.0.sensitivity")->numel());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const Tensor& x = fa.tensors[i].second;
    const Tensor* y = fb.find(fa.tensors[i].first);
    ASSERT_TRUE(y) << fa.tensors[i].first;
    ASSERT_EQ(x.nbytes(), y->nbytes()) << fa.tensors[i].first;
    EXPECT_EQ(std::memcmp(x.raw(), y->raw(), x.nbytes()), 0) << fa.tensors[i].first << " differs after resume";
  }
  EXPECT_EQ(a.epochs[1].train_loss, b2.epochs[0].train_loss);

  // Resuming that run under a config that quantizes other tensors with gact is an error naming
  // the difference: no GACT store at all, or fewer tensors (layer3's convolutions kept in FP32).
  auto resume_error = [&](std::vector<std::string> sets) {
    sets.push_back("train.epochs=3");
    try {
      run_training(tiny_config(fixture_data(), resumed, sets), again);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = resume_error({"saved_tensors.rules=[]", "train.steps_per_epoch=3"});
  EXPECT_NE(none.find("1 GACT store(s), but this config uses 0"), std::string::npos) << none;
  std::vector<std::string> fewer = gact;
  fewer[0] = "saved_tensors.rules=[{ops: [conv2d], layers: [\"layer3.*\"], scheme: fp32}]";
  const std::string fewer_msg = resume_error(fewer);
  EXPECT_NE(fewer_msg.find("gact store 0"), std::string::npos) << fewer_msg;
  EXPECT_NE(fewer_msg.find("quantized tensors, but this config quantizes"), std::string::npos) << fewer_msg;
}

TEST(Trainer, RunWritesConfigMetricsReportAndCheckpoints) {
  const fs::path out = temp_dir("run_files");
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  const Config c = tiny_config(fixture_data(), out, {"train.epochs=1", "train.steps_per_epoch=2"});
  o.extra_files = {{"plan.json", "{\"chosen\": \"first\"}\n"}};  // what memory.plan: auto writes
  const RunResult r = run_training(c, o);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].step, 2);
  for (const char* f : {"config.yaml", "metrics.csv", "metrics.jsonl", "memory_report.json", "saved_by_scheme.tsv"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_TRUE(fs::exists(checkpoint_path(out.string(), 1)));
  // The resolved config reads back to the same config.
  const Config back = load_config((out / "config.yaml").string());
  EXPECT_EQ(config_to_yaml(back), config_to_yaml(c));
  // Running again into the same directory is refused, naming it and the ways out, and leaves
  // the earlier run's files alone (tests/experiments/bad_inputs_test.cpp checks every byte).
  {
    Session stale = make_session(c, synthetic_input_spec(c));
    save_checkpoint(checkpoint_path(out.string(), 7), *stale.model, *stale.optimizer, {7, 0, c.seed}, "resnet20");
  }
  const std::string metrics_before = read_text(out / "metrics.csv");
  RunOptions refused = o;
  refused.extra_files = {{"plan.json", "{\"chosen\": \"second\"}\n"}};
  try {
    run_training(c, refused);
    FAIL() << "a fresh run overwrote an earlier run";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(out.string() + " holds an earlier run"), std::string::npos) << m;
    EXPECT_NE(m.find("--resume"), std::string::npos) << m;
    EXPECT_NE(m.find("--overwrite"), std::string::npos) << m;
  }
  EXPECT_EQ(read_text(out / "metrics.csv"), metrics_before);
  EXPECT_EQ(read_text(out / "plan.json"), "{\"chosen\": \"first\"}\n") << "a refused run rewrote the plan";
  EXPECT_TRUE(fs::exists(checkpoint_path(out.string(), 1)));
  EXPECT_TRUE(fs::exists(checkpoint_path(out.string(), 7)));
  // With overwrite it starts over: one row, no stale checkpoint.
  RunOptions replace = o;
  replace.overwrite = true;
  run_training(c, replace);
  EXPECT_EQ(latest_checkpoint(out.string()).value(), checkpoint_path(out.string(), 1));
  const Json row = parse_json(read_text(out / "metrics.jsonl"));
  EXPECT_EQ(row.at("epoch").get<int64_t>(), 1);
  EXPECT_TRUE(std::isfinite(row.at("train_loss").get<double>()));
  EXPECT_GT(row.at("peak_by_tag").at("Saved").get<int64_t>(), 0);
  EXPECT_GT(row.at("saved_bytes").get<int64_t>(), 0);
  EXPECT_GT(row.at("img_per_s").get<double>(), 0);
}

TEST(Trainer, GactRunLogsItsBitAllocationsInTheRunDirectory) {
  const fs::path out = temp_dir("run_gact");
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  const Config c = tiny_config(fixture_data(), out,
                               {"train.epochs=1", "train.steps_per_epoch=2", "saved_tensors.rules=[]",
                                "saved_tensors.default={scheme: gact, avg_bits: 2, tensors_per_refresh: 2}"});
  const RunResult r = run_training(c, o);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(r.epochs[0].train_loss));
  EXPECT_TRUE(fs::exists(out / "gact_bits.csv"));
  EXPECT_LT(r.report.saved_bytes, r.report.saved_fp32_bytes / 8);
}

TEST(Trainer, QuickstartConfigEndToEndOnASubset) {
  const fs::path out = temp_dir("quickstart");
  const Config c = load_config(std::string(PACKRAT_SOURCE_DIR) + "/configs/quickstart.yaml",
                               {"data.limit_train=512", "data.limit_test=500", "train.epochs=1",
                                "output.dir=" + out.string()});
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  const RunResult r = run_training(c, o);
  ASSERT_EQ(r.epochs.size(), 1u);
  const EpochMetrics& m = r.epochs[0];
  EXPECT_EQ(m.step, 4);  // 512 images in batches of 128
  EXPECT_TRUE(std::isfinite(m.train_loss));
  EXPECT_LT(m.train_loss, 3.0);
  EXPECT_GE(m.test_acc, 0.0);
  EXPECT_LE(m.test_acc, 1.0);
  EXPECT_EQ(r.report.batch_size, 128);
  EXPECT_EQ(r.report.saved_bytes, r.report.allocator_saved_bytes);
  EXPECT_TRUE(fs::exists(checkpoint_path(out.string(), 1)));
}

TEST(Trainer, NonFiniteLossNamesTheStepAndReleasesTheStep) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused");
  Session s = make_session(c, synthetic_input_spec(c));
  SyntheticBatch b = synthetic_batch(4, s.input.channels, s.input.height, s.input.width, s.input.classes, 1);
  // A diverged parameter (relu would swallow a NaN input): the logits and the loss are NaN.
  s.model->named_parameters().back().second.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  try {
    train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 17, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 17"), std::string::npos) << m;
    EXPECT_NE(m.find("lower optimizer.lr"), std::string::npos) << m;
    EXPECT_NE(m.find("fp32"), std::string::npos) << m;
  }
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), 0);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Activation), 0);
  for (auto* st : s.policy->stores()) EXPECT_EQ(st->live_count(), 0u);
}

// The trainer's OpenMP threads spin briefly before they sleep, unless the caller chose how they wait.
TEST(Trainer, OpenmpThreadsSpinBrieflyUnlessTheCallerChoseHowTheyWait) {
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(openmp_waiting_defaults(nullptr, nullptr),
            (Settings{{"OMP_WAIT_POLICY", "passive"}, {"GOMP_SPINCOUNT", std::to_string(kOpenmpSpinCount)}}));
  EXPECT_EQ(kOpenmpSpinCount, 3000);
  EXPECT_TRUE(openmp_waiting_defaults("passive", nullptr).empty());
  EXPECT_TRUE(openmp_waiting_defaults("active", nullptr).empty());
  EXPECT_TRUE(openmp_waiting_defaults(nullptr, "0").empty());
}

TEST(Trainer, CommandLineErrors) {
  EXPECT_THROW(parse_trainer_args({}), Error);
  EXPECT_THROW(parse_trainer_args({"--config"}), Error);
  EXPECT_THROW(parse_trainer_args({"--config", "a.yaml", "--bogus"}), Error);
  EXPECT_THROW(parse_trainer_args({"--config", "a.yaml", "--benchmark", "0"}), Error);
  EXPECT_THROW(parse_trainer_args({"--config", "a.yaml", "--benchmark", "3", "--memory-report-only"}), Error);
  const TrainerArgs a = parse_trainer_args({"--config", "a.yaml", "--set", "x=1", "--set", "y=2", "--find-max-batch", "2G"});
  EXPECT_EQ(a.sets.size(), 2u);
  EXPECT_EQ(a.max_batch_bytes, int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("512M", "f"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1000", "f"), 1000);
  EXPECT_THROW(parse_byte_size("12Q", "f"), Error);
  EXPECT_THROW(run_trainer(parse_trainer_args({"--config", "/nonexistent.yaml"})), Error);
}

TEST(Trainer, BenchmarkReportsThroughputAndBytes) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"data.batch_size=8"});
  const BenchmarkResult r = benchmark(c, 2);
  EXPECT_GT(r.img_per_s, 0);
  EXPECT_GT(r.saved_bytes, 0);
  EXPECT_GE(r.peak_bytes, r.saved_bytes);
  const Json j = parse_json(r.json().dump());
  EXPECT_TRUE(j.at("img_per_s").is_number());
  EXPECT_EQ(j.at("saved_bytes").get<int64_t>(), r.saved_bytes);
  EXPECT_EQ(j.at("peak_bytes").get<int64_t>(), r.peak_bytes);
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");
  EXPECT_GT(j.at("forward_ms").get<double>(), 0.0);
  EXPECT_EQ(j.at("recompute_ms").get<double>(), 0.0);  // nothing recomputed
  EXPECT_GT(j.at("backward_ms").get<double>(), 0.0);
  EXPECT_EQ(j.at("precision").get<std::string>(), "fp32");
  EXPECT_DOUBLE_EQ(j.at("saved_vs_fp32_store").get<double>(),
                   static_cast<double>(r.saved_bytes) / static_cast<double>(r.saved_fp32_bytes));
  EXPECT_EQ(j.at("saved_vs_f32").get<double>(), j.at("saved_vs_fp32_store").get<double>());  // no autocast
  EXPECT_EQ(j.size(), 10u);
}

TEST(Trainer, MaxBatchFitsInTheLimitAndGrowsWithIt) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]"});
  const MemoryStats before = Allocator::cpu().stats();
  const int64_t limit = before.total_current + (int64_t{12} << 20);
  const MaxBatchResult r = find_max_batch(c, limit, 128);
  // Steps that ran out of memory half-way left nothing behind (Workspace holds oneDNN's caches).
  const MemoryStats after = Allocator::cpu().stats();
  for (MemTag t : {MemTag::Parameter, MemTag::Gradient, MemTag::OptimizerState, MemTag::Activation, MemTag::Saved,
                   MemTag::Data})
    EXPECT_EQ(after.at(t), before.at(t)) << tag_name(t);
  ASSERT_GT(r.batch_size, 1);
  ASSERT_LT(r.batch_size, 128);
  EXPECT_LE(r.peak_bytes, limit);
  EXPECT_EQ(Allocator::cpu().limit(), 0);
  // More room fits a larger batch; the bytes of one step grow linearly with the batch.
  const MaxBatchResult r2 = find_max_batch(c, limit + (int64_t{12} << 20), 256);
  EXPECT_GT(r2.batch_size, r.batch_size * 3 / 2);
  EXPECT_LE(r2.peak_bytes, limit + (int64_t{12} << 20));
}

// The trials measure memory: a model whose loss is no longer finite (here a warm-up step at a
// learning rate that sends the weights to infinity; on ResNet-50 at batch 1, 2-bit storage did
// it) still has its largest batch found, as a finite one's.
TEST(Trainer, MaxBatchIsFoundWhereTheLossIsNotFinite) {
  const std::vector<std::string> sets = {"saved_tensors.rules=[]", "train.clip_grad_norm=0"};
  const int64_t limit = Allocator::cpu().stats().total_current + (int64_t{12} << 20);
  const MaxBatchResult finite = find_max_batch(tiny_config("/nonexistent", "/tmp/unused", sets), limit, 128);
  Config diverging = tiny_config("/nonexistent", "/tmp/unused", sets);
  diverging.optimizer.lr = 1e30;  // past the key's range: only a test can ask for it
  const MaxBatchResult r = find_max_batch(diverging, limit, 128);
  EXPECT_EQ(r.batch_size, finite.batch_size);
  EXPECT_GT(r.batch_size, 1);
}

// Under GACT's measured estimator a fresh store measures its sensitivities in its first step.
// The search's trials start from the warm-up step's allocation instead, as a resumed run would:
// none of them refreshes, and the search finds the same batch as one that pays the refresh in
// every trial would not be asked to.
TEST(Trainer, MaxBatchTrialsUnderGactStartFromTheWarmUpAllocation) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused",
                               {"saved_tensors.rules=[]", "saved_tensors.default={scheme: gact-L1}"});
  const int64_t limit = Allocator::cpu().stats().total_current + (int64_t{12} << 20);
  const MaxBatchResult r = find_max_batch(c, limit, 64);
  EXPECT_GT(r.batch_size, 1);
  EXPECT_GT(r.trials, 3);
  EXPECT_EQ(r.refreshes, 0);
  EXPECT_LE(r.peak_bytes, limit);
}

// GACT's measured estimator runs one backward per saved tensor at its first refresh. A benchmark
// and the memory report measure the steady step, so at a batch over kFirstEstimateBatch that
// refresh runs in a step at kFirstEstimateBatch before them, not at the batch: its log (one row per
// tensor) shows the tensors' sizes at 8 whatever the batch, and no refresh after it. A later
// measurement of the same config in the process, at any batch, takes that estimate and refreshes
// nothing (the plan's profiles and --find-max-batch's trials), with the same bits.
TEST(Trainer, BenchmarkAndMemoryReportRunGactsFirstEstimateOnASmallBatch) {
  ASSERT_EQ(kFirstEstimateBatch, 8);
  const std::string log = ::testing::TempDir() + "gact_first_estimate.csv";
  auto refreshes = [&](const std::function<void(const Config&)>& measure, int64_t batch,
                       const std::string& estimator = "measured", uint64_t seed = 0) {
    std::remove(log.c_str());
    measure(tiny_config("/nonexistent", ::testing::TempDir() + "gact_first_estimate_run",
                        {"saved_tensors.rules=[]",
                         "saved_tensors.default={scheme: gact-L1, estimator: " + estimator + ", log_path: " + log + "}",
                         "data.batch_size=" + std::to_string(batch), "seed=" + std::to_string(seed)}));
    std::ifstream in(log);
    std::vector<std::string> rows;  // "step,index,layer,op,numel,..." after the header
    for (std::string line; std::getline(in, line);)
      if (!line.starts_with("step")) rows.push_back(line);
    return rows;
  };
  const auto bench = [](const Config& c) { benchmark(c, 2); };
  const auto report = [](const Config& c) { memory_report_only(c); };
  const std::vector<std::string> at_8 = refreshes(bench, 8);
  ASSERT_FALSE(at_8.empty());
  EXPECT_TRUE(at_8.front().starts_with("0,")) << "the one refresh is step 0's";
  EXPECT_EQ(refreshes(bench, 32), at_8) << "sizes at batch 8, and no refresh in the timed steps";
  EXPECT_TRUE(refreshes(bench, 16).empty()) << "the same config's estimate, taken from the measurement at 32";
  int64_t saved[2] = {0, 0};
  const std::vector<std::string> report_rows =
      refreshes([&](const Config& c) { saved[0] = memory_report_only(c).saved_bytes; }, 32, "measured", 1);
  // Another seed's config estimates again, at 8 as the benchmark did: its rows' step, index, layer,
  // op and size are at_8's (the sensitivities and bits are of its own weights).
  auto sizes = [](const std::vector<std::string>& rows) {
    std::vector<std::string> out;
    for (const std::string& r : rows) {
      size_t cut = 0;
      for (int field = 0; field < 5; ++field) cut = r.find(',', cut) + 1;
      out.push_back(r.substr(0, cut));
    }
    return out;
  };
  EXPECT_EQ(sizes(report_rows), sizes(at_8));
  EXPECT_TRUE(refreshes([&](const Config& c) { saved[1] = memory_report_only(c).saved_bytes; }, 32, "measured", 1).empty());
  EXPECT_EQ(saved[1], saved[0]) << "the bits of the estimate it took";
  EXPECT_NE(refreshes(bench, 4), at_8) << "a smaller batch estimates on itself";
  // An estimator without extra passes refreshes within the step at the batch, as training does.
  const std::vector<std::string> analytic = refreshes(bench, 32, "analytic");
  ASSERT_FALSE(analytic.empty());
  EXPECT_NE(analytic.front(), refreshes(bench, 8, "analytic").front()) << "the analytic estimate is of the batch";
}

// The plan's GACT options and probes share most of their tensors. A config's first estimate takes
// what an earlier estimate of the same model (seed, data, batch, precision) measured under other
// storage and measures the rest: with every block recomputed, only the blocks' inputs (op
// checkpoint), which no estimate without recomputation saw.
TEST(Trainer, GactsFirstEstimateTakesTheSameModelsSensitivitiesUnderOtherStorage) {
  const std::string log = ::testing::TempDir() + "gact_adopted.csv";
  auto sensitivities = [&](const std::vector<std::string>& sets) {
    std::remove(log.c_str());
    std::vector<std::string> all = {"saved_tensors.rules=[]", "data.batch_size=16", "seed=29"};
    all.insert(all.end(), sets.begin(), sets.end());
    benchmark(tiny_config("/nonexistent", ::testing::TempDir() + "gact_adopted_run", all), 1);
    std::map<TensorName, std::string> out;  // as logged
    std::map<std::pair<std::string, std::string>, int64_t> seen;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("step")) continue;
      std::vector<std::string> f;  // step,index,layer,op,numel,sensitivity,bits,recomputed_in
      std::stringstream fields(line);
      for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
      out[{f[2], f[3], seen[{f[2], f[3]}]++}] = f[5];
    }
    return out;
  };
  const std::string gact = "saved_tensors.default={scheme: gact-L1, log_path: " + log + "}";
  const std::map<TensorName, std::string> alone = sensitivities({gact});
  const std::map<TensorName, std::string> recomputed = sensitivities({gact, "memory.recompute=[blocks]"});
  int inputs = 0, shared = 0;
  for (const auto& [name, c] : recomputed) {
    const auto& [layer, op, occurrence] = name;  // GactStore's names of a step's tensors
    if (op == "checkpoint") {
      ++inputs;
      EXPECT_FALSE(alone.contains(name)) << layer;
      EXPECT_NE(c, "0") << layer << ": measured";
      continue;
    }
    ASSERT_TRUE(alone.contains(name)) << layer << " " << op << " " << occurrence;
    EXPECT_EQ(c, alone.at(name)) << layer << " " << op << " " << occurrence << ": taken, not measured again";
    ++shared;
  }
  EXPECT_EQ(inputs, 9) << "ResNet-20's blocks";
  // Each block's input is held once, as the checkpoint's codes, not again by its first convolution.
  EXPECT_EQ(shared + inputs, static_cast<int>(alone.size()));
  // Another model (its seed), or c_l in other units (relative variance: SGD's auto is absolute),
  // measures every tensor.
  auto taken = [&](const std::map<TensorName, std::string>& other) {
    int same = 0;
    for (const auto& [name, c] : other) same += alone.contains(name) && alone.at(name) == c;
    return same;
  };
  EXPECT_EQ(taken(sensitivities({gact, "seed=30"})), 0);
  EXPECT_EQ(taken(sensitivities({"saved_tensors.default={scheme: gact-L1, variance: relative, log_path: " + log + "}"})), 0);
}

// actnn-L3 re-allocates its bits from every step's statistics, so a trial's step (allocated
// from the step before, at another batch) is not training's: the largest batch is confirmed by a
// second step at it on the same policy, and it trains there in the limit in steady state.
TEST(Trainer, MaxBatchUnderAStoreThatReallocatesEveryStepIsConfirmedByASteadyStep) {
  const int64_t limit = Allocator::cpu().stats().total_current + (int64_t{12} << 20);
  const Config fp32 = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]"});
  EXPECT_EQ(find_max_batch(fp32, limit, 128).confirmations, 0);
  Config l3 = tiny_config("/nonexistent", "/tmp/unused",
                          {"saved_tensors.rules=[]", "saved_tensors.default={scheme: actnn-L3}"});
  const MaxBatchResult r = find_max_batch(l3, limit, 128);
  EXPECT_GE(r.confirmations, 1);
  ASSERT_GT(r.batch_size, 1);
  EXPECT_LE(r.peak_bytes, limit);
  l3.data.batch_size = r.batch_size;
  EXPECT_LE(benchmark(l3, 2).peak_bytes, limit) << "two steps after a warm-up at batch " << r.batch_size;
}

TEST(Trainer, GactRefreshDoesNotTouchTheBatchnormStatistics) {
  // The forward is the same under every storage scheme, so after one step the running
  // statistics match FP32 storage exactly, although GACT ran extra gradient passes to measure
  // its sensitivities.
  const Config fp32 = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]"});
  const Config gact = tiny_config("/nonexistent", "/tmp/unused",
                                  {"saved_tensors.rules=[]", "saved_tensors.default={scheme: gact, avg_bits: 3, tensors_per_refresh: 2}"});
  Session a = make_session(fp32, synthetic_input_spec(fp32));
  Session b = make_session(gact, synthetic_input_spec(gact));
  SyntheticBatch x = synthetic_batch(4, a.input.channels, a.input.height, a.input.width, a.input.classes, 2);
  const StepResult ra = train_step(*a.model, *a.optimizer, *a.policy, x.images, x.labels, 0, {});
  const StepResult rb = train_step(*b.model, *b.optimizer, *b.policy, x.images, x.labels, 0, {});
  EXPECT_EQ(ra.loss, rb.loss);
  const auto ba = a.model->named_buffers(), bb = b.model->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_EQ(ba[i].second.to_vector(), bb[i].second.to_vector()) << ba[i].first;
  ASSERT_EQ(b.policy->stores()[0]->scheme(), "gact");
  EXPECT_LT(rb.saved_record_bytes, ra.saved_record_bytes / 4);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), 0);
}
