// trainer --benchmark STEPS --vs key=value: two configs' steps in turn in one process.
#include "experiments/lib/paired_benchmark.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "experiments/lib/cli.h"
#include "tests/experiments/tiny_config.h"

namespace packrat {
namespace {

using testing::tiny_config;

// Each side trains its own session under its own config: 2-bit storage against FP32 saves in
// bf16, each side's saved bytes and precision its own; the speed ratio is the sides' step times'.
TEST(PairedBenchmark, TimesEachConfigsOwnSessionInTurn) {
  const Config a = tiny_config("/nonexistent", "/tmp/unused", {"data.batch_size=8", "saved_tensors.default={scheme: actnn, bits: 2}"});
  const Config b = tiny_config("/nonexistent", "/tmp/unused", {"data.batch_size=8", "precision=bf16"});
  const PairedBenchmark p = benchmark_pair(a, b, 3);
  EXPECT_EQ(p.config.precision, "fp32");
  EXPECT_EQ(p.vs.precision, "bf16");
  EXPECT_GT(p.config.saved_bytes, 0);
  EXPECT_LT(p.config.saved_bytes * 4, p.vs.saved_bytes) << "2-bit codes against bf16 and f32 saves";
  EXPECT_LT(p.vs.saved_fp32_bytes, p.vs.saved_f32_bytes) << "the bf16 side's AMP baseline: its convolutions save bf16";
  EXPECT_EQ(p.config.saved_fp32_bytes, p.config.saved_f32_bytes) << "the fp32 side runs without autocast";
  ASSERT_GT(p.config.seconds, 0);
  ASSERT_GT(p.vs.seconds, 0);
  EXPECT_DOUBLE_EQ(p.speed_vs, p.vs.seconds / p.config.seconds);
  EXPECT_NEAR(p.speed_vs, p.config.img_per_s / p.vs.img_per_s, 1e-9 * p.speed_vs);
  EXPECT_NEAR(p.config.img_per_s, 3 * 8 / p.config.seconds, 1e-9 * p.config.img_per_s);
  EXPECT_LE(p.pair_min, p.pair_median);
  EXPECT_LE(p.pair_median, p.pair_max);
  EXPECT_GT(p.config.forward_ms, 0);
  EXPECT_GT(p.vs.backward_ms, 0);

  const Json j = parse_json(p.json().dump());
  EXPECT_EQ(j.at("config").at("saved_bytes").get<int64_t>(), p.config.saved_bytes);
  EXPECT_EQ(j.at("vs").at("precision").get<std::string>(), "bf16");
  EXPECT_FALSE(j.at("config").contains("peak_bytes")) << "both sessions share the allocator: no side's own peak";
  EXPECT_DOUBLE_EQ(j.at("speed_vs").get<double>(), p.speed_vs);
  EXPECT_DOUBLE_EQ(j.at("pair_median").get<double>(), p.pair_median);
}

TEST(PairedBenchmark, RefusesWhatTwoConfigsCannotShareInOneProcess) {
  const Config a = tiny_config("/nonexistent", "/tmp/unused", {"threads=1"});
  const Config b = tiny_config("/nonexistent", "/tmp/unused", {"threads=2"});
  try {
    benchmark_pair(a, b, 1);
    FAIL() << "threads 1 against 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("threads is 1 against 2"), std::string::npos) << e.what();
  }
  const Config planned = tiny_config("/nonexistent", "/tmp/unused", {"memory.plan=auto", "memory.budget=1G"});
  try {
    benchmark_pair(tiny_config("/nonexistent", "/tmp/unused"), planned, 1);
    FAIL() << "memory.plan: auto accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give the option it chose"), std::string::npos) << e.what();
  }
}

TEST(PairedBenchmark, VsNeedsBenchmark) {
  const TrainerArgs ok = parse_trainer_args({"--config", "a.yaml", "--benchmark", "2", "--vs", "x=1", "--vs", "y=2"});
  EXPECT_EQ(ok.vs_sets, (std::vector<std::string>{"x=1", "y=2"}));
  try {
    parse_trainer_args({"--config", "a.yaml", "--vs", "x=1"});
    FAIL() << "--vs without --benchmark accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vs key=value: applies to --benchmark STEPS only"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_trainer_args({"--config", "a.yaml", "--benchmark", "2", "--vs"}), Error);
}

}  // namespace
}  // namespace packrat
