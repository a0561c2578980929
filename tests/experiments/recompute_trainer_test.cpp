// memory.recompute and the gact-CB1 preset through the trainer's config: which modules become
// segments, what the memory report says of them, what the benchmark times, and the Saved peak
// falling as the lever promises on a ResNet-50.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/resume_check.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

std::vector<std::string> layer2_blocks() { return {"layer2.0", "layer2.1", "layer2.2"}; }

int64_t checkpoint_records(const MemoryReport& r, const std::string& scheme) {
  int64_t n = 0;
  for (const SavedRecord& t : r.tensors) n += t.op == "checkpoint" && t.scheme == scheme;
  return n;
}

// ResNet-50 (ImageNet stem) on CIFAR-shaped synthetic inputs, batch 8.
Config resnet50(const std::string& name, const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"data.dataset=cifar10", "data.train_transforms=[]", "data.batch_size=8",
                                  "model.arch=resnet50", "saved_tensors.rules=[]"};
  all.insert(all.end(), sets.begin(), sets.end());
  return tiny_config("/nonexistent", temp_dir(name), all);
}

}  // namespace

TEST(RecomputeTrainer, TheConfigNamesTheSegmentsAndTheReportShowsWhatTheyKept) {
  const auto dir = temp_dir("recompute_report");
  const Config c = tiny_config("/nonexistent", dir, {"memory.recompute=[\"layer2.*\"]"});
  EXPECT_EQ(recompute_globs(c), (std::vector<std::string>{"layer2.*"}));
  const MemoryReport r = memory_report_only(c);
  EXPECT_EQ(r.recomputed, layer2_blocks());
  EXPECT_EQ(checkpoint_records(r, "fp32"), 3);
  EXPECT_EQ(r.recompute.recomputes, 3);
  EXPECT_GT(r.recompute.recompute_s, 0.0);
  EXPECT_GT(r.recompute.peak_bytes, 0);
  for (const SavedRecord& t : r.tensors) EXPECT_NE(t.layer.rfind("layer2.0.", 0), 0u) << t.op << " " << t.layer;
  const std::string table = memory_report_table(r);
  EXPECT_NE(table.find("Recomputed in backward (memory.recompute): 3 segments (layer2.0, layer2.1, layer2.2)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("Recompute phase: 3 segment forwards run again"), std::string::npos) << table;
  // layer2.0's input is layer1.2's ReLU output, which that ReLU keeps too (FP32: the same buffer).
  EXPECT_NE(table.find("counted once, with the op that saved it first"), std::string::npos) << table;
  const Json j = memory_report_json(r);
  EXPECT_EQ(j["recompute"]["segments"].size(), 3u);
  EXPECT_GT(j["recompute"]["inputs_bytes_by_scheme"]["fp32"].get<int64_t>(), 0);
  EXPECT_GT(j["totals"]["recompute_ms"].get<double>(), 0.0);

  // Without the key: no segment, no recompute section.
  const MemoryReport plain = memory_report_only(tiny_config("/nonexistent", dir, {}));
  EXPECT_TRUE(plain.recomputed.empty());
  EXPECT_EQ(checkpoint_records(plain, "fp32"), 0);
  EXPECT_FALSE(memory_report_json(plain).contains("recompute"));
}

TEST(RecomputeTrainer, AGlobThatMatchesNoModuleIsAnErrorNamingTheKeyAndTheModules) {
  const Config c = tiny_config("/nonexistent", temp_dir("recompute_bad"), {"memory.recompute=[\"layer9.*\"]"});
  const std::string m = message_of([&] { memory_report_only(c); });
  EXPECT_NE(m.find("tiny.yaml: memory.recompute: 'layer9.*' matches no module"), std::string::npos) << m;
  EXPECT_NE(m.find("conv1, bn1, act, layer1, layer2, layer3, avgpool, fc"), std::string::npos) << m;
  const std::string t = message_of([] { tiny_config("/nonexistent", "/tmp/unused", {"memory.recompute={a: 1}"}); });
  EXPECT_NE(t.find("memory.recompute"), std::string::npos) << t;
  const std::string k = message_of([] { tiny_config("/nonexistent", "/tmp/unused", {"memory.recompte=[blocks]"}); });
  EXPECT_NE(k.find("recompte"), std::string::npos) << k;
}

TEST(RecomputeTrainer, GactCB1IsGactL1StorageWithEveryBlockRecomputed) {
  const Config c = tiny_config("/nonexistent", temp_dir("recompute_cb1"),
                               {"saved_tensors.default={scheme: gact-CB1}", "saved_tensors.rules=[]"});
  EXPECT_EQ(recompute_globs(c), (std::vector<std::string>{"blocks"}));
  const MemoryReport r = memory_report_only(c);
  EXPECT_EQ(r.recomputed.size(), 9u);  // resnet20: 3 stages of 3 BasicBlocks
  EXPECT_EQ(checkpoint_records(r, "gact"), 9);
  // The config's own list wins over the preset's.
  const Config own = tiny_config("/nonexistent", temp_dir("recompute_cb1_own"),
                                 {"saved_tensors.default={scheme: gact-CB1}", "memory.recompute=[\"layer2.*\"]"});
  EXPECT_EQ(memory_report_only(own).recomputed, layer2_blocks());
}

TEST(RecomputeTrainer, TheBenchmarkTimesForwardRecomputeAndBackward) {
  const Config c = tiny_config("/nonexistent", temp_dir("recompute_bench"), {"memory.recompute=[blocks]"});
  const BenchmarkResult b = benchmark(c, 1);
  EXPECT_GT(b.forward_ms, 0.0);
  EXPECT_GT(b.recompute_ms, 0.0);
  EXPECT_GT(b.backward_ms, 0.0);
  const Json j = b.json();
  EXPECT_DOUBLE_EQ(j["recompute_ms"].get<double>(), b.recompute_ms);
  const BenchmarkResult plain = benchmark(tiny_config("/nonexistent", temp_dir("recompute_bench0"), {}), 1);
  EXPECT_EQ(plain.recompute_ms, 0.0);
}

TEST(RecomputeTrainer, ResNet50SavedPeakFallsToTheBlockInputsAndFurtherWithGactCB1) {
  const int64_t l0 = memory_report_only(resnet50("r50_l0", {})).step.peak_at(MemTag::Saved);
  const int64_t recompute =
      memory_report_only(resnet50("r50_rc", {"memory.recompute=[blocks]"})).step.peak_at(MemTag::Saved);
  const int64_t cb1 =
      memory_report_only(resnet50("r50_cb1", {"saved_tensors.default={scheme: gact-CB1}"})).step.peak_at(MemTag::Saved);
  EXPECT_LE(static_cast<double>(recompute), 0.40 * static_cast<double>(l0)) << recompute << " of " << l0;
  EXPECT_LE(static_cast<double>(cb1), 0.10 * static_cast<double>(l0)) << cb1 << " of " << l0;
}

// --gradient-fidelity with recomputation: the compressed backward (8-bit per-group storage of the
// segments' inputs and of what their recompute saves) measured against FP32, as without it.
TEST(RecomputeTrainer, GradientFidelityMeasuresTheRecomputedBackward) {
  const auto data = make_idx_dataset("recompute_fidelity", 32, 8);
  const Config c = tiny_config(data, temp_dir("recompute_fidelity"),
                               {"saved_tensors.rules=[]", "saved_tensors.default={scheme: actnn, bits: 8}",
                                "memory.recompute=[blocks]"});
  const FidelityReport r = gradient_fidelity_mode(c, 2);
  EXPECT_GT(r.total.cosine, 0.99);
  EXPECT_LT(r.total.cosine, 1.0);  // the inputs are compressed: the gradient is not FP32's
  EXPECT_LT(r.total.rel_bias, 0.25);  // two draws: their variance is part of it
}

// gact-CB1 resumes bit-identically: GACT's restored state is checked against what the first
// step quantized, forward and recompute (the recomputed tensors are quantized in the backward).
TEST(RecomputeTrainer, GactCB1ResumesBitIdentically) {
  const auto data = make_idx_dataset("recompute_resume", 48, 16);
  const ResumedRuns r = expect_resume_bit_identical(
      data,
      {"saved_tensors.rules=[]", "train.steps_per_epoch=3",
       "saved_tensors.default={scheme: gact-CB1, adapt_interval: 2, tensors_per_refresh: 4}"},
      "cb1");
  EXPECT_TRUE(r.straight.find("gact.0.bits"));
}
