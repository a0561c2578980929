#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/lib/memory_report.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/train_loop.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

struct OneStep {
  StepResult result;
  int64_t activation_before = 0, saved_before = 0;
  int64_t activation_after = 0, saved_after = 0;
};

OneStep one_step(const Config& c, int64_t batch) {
  Session s = make_session(c, synthetic_input_spec(c));
  SyntheticBatch b = synthetic_batch(batch, s.input.channels, s.input.height, s.input.width, s.input.classes, 1);
  OneStep o;
  o.activation_before = Allocator::cpu().current(MemTag::Activation);
  o.saved_before = Allocator::cpu().current(MemTag::Saved);
  StepOptions opt;
  opt.capture_saved = true;
  o.result = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, opt);
  o.activation_after = Allocator::cpu().current(MemTag::Activation);
  o.saved_after = Allocator::cpu().current(MemTag::Saved);
  return o;
}

}  // namespace

TEST(MemoryReport, SavedTotalsMatchTheAllocatorAndStepLeavesNothing) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused");
  OneStep o = one_step(c, 8);
  const MemoryReport r = make_memory_report(8, o.result.saved, o.result.saved_allocator_bytes, o.result.memory);
  ASSERT_FALSE(r.tensors.empty());
  EXPECT_GT(r.saved_bytes, 0);
  // The report's bytes are the allocator's: every byte under the Saved tag is listed, once.
  EXPECT_EQ(r.saved_bytes, r.allocator_saved_bytes);
  EXPECT_EQ(r.saved_bytes, o.result.saved_record_bytes);
  // layer2's relus keep 1-bit masks; everything else is FP32.
  int64_t fewbit = 0;
  for (const auto& t : r.tensors) {
    if (t.scheme == "fewbit") {
      ++fewbit;
      EXPECT_EQ(t.layer.rfind("layer2.", 0), 0u) << t.layer;
    }
  }
  EXPECT_GT(fewbit, 0);
  // The FP32 figure is what the FP32 store really holds in the same step. Here it is below the
  // saved bytes: FP32 keeps each relu output once (the next conv saves the same buffer), so the
  // masks are extra memory while the convs keep their inputs in FP32 — the report must say so.
  Config fp32 = c;
  fp32.saved_tensors = StorePolicySpec{};
  OneStep baseline = one_step(fp32, 8);
  const MemoryReport rb =
      make_memory_report(8, baseline.result.saved, baseline.result.saved_allocator_bytes, baseline.result.memory);
  EXPECT_EQ(rb.saved_bytes, rb.saved_fp32_bytes);
  EXPECT_EQ(r.saved_fp32_bytes, rb.saved_bytes);
  EXPECT_GT(r.saved_bytes, r.saved_fp32_bytes);
  // After the backward, activations and saved tensors are all released.
  EXPECT_EQ(o.activation_after, o.activation_before);
  EXPECT_EQ(o.saved_after, o.saved_before);
  EXPECT_EQ(o.saved_after, 0);
  EXPECT_EQ(o.activation_after, 0);
  // The step's peak covers at least what was saved at the end of the forward.
  EXPECT_GE(r.step.total_peak, r.saved_bytes);
  EXPECT_GE(r.step.peak_at(MemTag::Saved), r.saved_bytes);
}

TEST(MemoryReport, ScalesWithTheBatch) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]"});
  const int64_t a = one_step(c, 4).result.saved_allocator_bytes, b = one_step(c, 8).result.saved_allocator_bytes;
  EXPECT_GT(b, a);
  EXPECT_LE(b, 2 * a);  // the activations double; nothing else grows
}

TEST(MemoryReport, JsonHasTheDocumentedShapeAndTableTheTotals) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused");
  OneStep o = one_step(c, 4);
  const MemoryReport r = make_memory_report(4, o.result.saved, o.result.saved_allocator_bytes, o.result.memory);
  const auto dir = temp_dir("memory_report");
  write_memory_report(r, dir.string());
  std::ifstream in(dir / "memory_report.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const Json j = parse_json(ss.str());
  EXPECT_EQ(j.at("batch_size").get<int64_t>(), 4);
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");  // the allocator that measured the step
  const Json& totals = j.at("totals");
  EXPECT_EQ(totals.at("saved_bytes").get<int64_t>(), r.saved_bytes);
  EXPECT_EQ(totals.at("saved_fp32_bytes").get<int64_t>(), r.saved_fp32_bytes);
  EXPECT_EQ(totals.at("peak_bytes").get<int64_t>(), r.step.total_peak);
  EXPECT_EQ(totals.at("peak_by_tag").at("Saved").get<int64_t>(), r.step.peak_at(MemTag::Saved));
  EXPECT_TRUE(totals.at("peak_by_tag").contains("Activation"));
  int64_t sum = 0, sum32 = 0;
  for (const Json& t : j.at("tensors")) {
    for (const char* k : {"layer", "op", "scheme"}) EXPECT_TRUE(t.at(k).is_string()) << k;
    EXPECT_GT(t.at("bits").get<double>(), 0);
    sum += t.at("bytes").get<int64_t>();
    sum32 += t.at("fp32_bytes").get<int64_t>();
  }
  EXPECT_EQ(sum, r.saved_bytes);
  EXPECT_EQ(sum32, r.saved_fp32_bytes);
  EXPECT_EQ(j.at("tensors").front().at("layer").get<std::string>(), "conv1");
  EXPECT_TRUE(std::filesystem::exists(dir / "saved_by_scheme.tsv"));

  const std::string table = memory_report_table(r);
  EXPECT_NE(table.find("layer1.0.conv1"), std::string::npos);
  EXPECT_NE(table.find("Total saved"), std::string::npos);
  EXPECT_NE(table.find(std::to_string(r.saved_bytes) + " bytes"), std::string::npos);
  EXPECT_NE(table.find("Per layer"), std::string::npos);
  EXPECT_NE(table.find("(batch 4, on cpu)"), std::string::npos);
  EXPECT_NE(table.find("Peak over the step on cpu"), std::string::npos);
}

TEST(MemoryReport, NamesTheDeviceWhoseAllocatorMeasuredTheStep) {
  MemoryStats stats;  // as a GPU's allocator would hand them over
  stats.device = Device::cuda(1);
  stats.total_peak = 1234;
  const MemoryReport r = make_memory_report(2, {}, 0, stats);
  EXPECT_EQ(memory_report_json(r).at("device").get<std::string>(), "cuda:1");
  EXPECT_NE(memory_report_table(r).find("Peak over the step on cuda:1: "), std::string::npos);
}

// What a row that says little by its numbers alone says in words: an exactly kept ReLU mask is
// "exact", a convolution input FP32 would keep once (the ReLU's output) names where it is
// counted instead of a 0.00x ratio, and a report on synthetic inputs says so.
TEST(MemoryReport, RowsSayWhatIsExactAndWhereASharedBufferIsCounted) {
  const Config c = tiny_config("/nonexistent", temp_dir("report_words"),
                               {"saved_tensors.rules=[]", "saved_tensors.default={scheme: actnn, bits: 2}"});
  const MemoryReport r = memory_report_only(c);
  const std::string table = memory_report_table(r);
  EXPECT_NE(table.find("synthetic inputs of the data's shape"), std::string::npos) << table;
  bool relu_exact = false, conv_elsewhere = false;
  for (const SavedRecord& t : r.tensors) {
    if (t.op == "relu") {
      EXPECT_TRUE(t.exact) << t.layer;
      relu_exact = relu_exact || t.exact;
    }
    if (t.op == "conv2d") {
      EXPECT_FALSE(t.exact) << t.layer;
    }
    conv_elsewhere = conv_elsewhere || (t.op == "conv2d" && t.fp32_bytes == 0);
  }
  EXPECT_TRUE(relu_exact);
  EXPECT_TRUE(conv_elsewhere);
  EXPECT_NE(table.find("relu           actnn        1"), std::string::npos) << table;
  EXPECT_NE(table.find("(exact: f' of a step function as a 1-bit mask)"), std::string::npos) << table;
  EXPECT_NE(table.find("-  (FP32 would keep this buffer once, with layer1.0.act1 relu)"), std::string::npos) << table;
  EXPECT_EQ(table.find("0.00x"), std::string::npos) << table;
  EXPECT_NE(memory_report_json(r).dump().find("\"exact\":true"), std::string::npos);

  // Batchnorm's per-channel mean and variance are left to their layers' totals: one table row per
  // batchnorm (its input), and a line that says how many were folded.
  int64_t bn_inputs = 0, bn_stats = 0;
  for (const SavedRecord& t : r.tensors)
    if (t.op == "batchnorm2d") (t.statistics ? bn_stats : bn_inputs) += 1;
  EXPECT_EQ(bn_stats, 2 * bn_inputs);
  const std::string rows = table.substr(0, table.find("Per op"));
  int64_t bn_rows = 0;
  for (size_t at = rows.find(" batchnorm2d "); at != std::string::npos; at = rows.find(" batchnorm2d ", at + 1)) ++bn_rows;
  EXPECT_EQ(bn_rows, bn_inputs) << table;
  EXPECT_NE(table.find(fmt::format("(and {} batchnorm mean / variance tensors", bn_stats)), std::string::npos) << table;
  // The per-op totals: every op kind once, in the JSON too.
  EXPECT_NE(table.find("Per op (bytes held, by scheme):\n"), std::string::npos) << table;
  const Json j = memory_report_json(r);
  int64_t op_bytes = 0;
  for (const Json& o : j["ops"]) op_bytes += o["bytes"].get<int64_t>();
  EXPECT_EQ(op_bytes, r.saved_bytes);
  // Every tensor's shape and element type: the stem convolution's input is the batch of images.
  const Json& first = j["tensors"][0];
  EXPECT_EQ(first["op"], "conv2d");
  EXPECT_EQ(first["shape"], Json::parse("[16, 1, 12, 12]")) << first.dump();
  EXPECT_EQ(first["dtype"], "f32");
}

// The report's peak is a training step's as every step after the first has it: with AdamW's two
// buffers the size of the parameters, which the first step allocates at its update, after its
// backward's peak. So it is the peak --benchmark's steps (after their warm-up step) reach.
TEST(MemoryReport, PeakHoldsTheOptimizerStateAsEveryLaterStepDoes) {
  const Config c = tiny_config("/nonexistent", temp_dir("report_steady_peak"),
                               {"optimizer={name: adamw, lr: 0.001}", "data.batch_size=8"});
  const MemoryReport r = memory_report_only(c);
  const BenchmarkResult later = benchmark(c, 1);
  EXPECT_EQ(r.step.total_peak, later.peak_bytes);
  // And the state is in it: the first step of a fresh session, which allocates the state only at
  // its update, peaks lower; the reported step holds AdamW's two f32 buffers a parameter.
  Session s = make_session(c, synthetic_input_spec(c));
  const SyntheticBatch b = synthetic_inputs(c, s.input, c.data.batch_size);
  StepOptions o;
  const StepResult first = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, o);
  EXPECT_LT(first.memory.total_peak, r.step.total_peak);
  EXPECT_EQ(r.step.peak[static_cast<size_t>(MemTag::OptimizerState)], 2 * s.model->num_parameters() * 4);
}
