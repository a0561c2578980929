// `precision` through the trainer's config: bf16 autocast halves what the FP32 store holds (the
// allocator's Saved bytes), the memory report and --benchmark give their ratios against both
// baselines, bf16 and fp16 runs resume bit-identically, an unknown precision is refused naming
// the key, and the log line says how each precision runs here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/lib/memory_report.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/resume_check.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;

TEST(PrecisionTrainer, Bf16HalvesWhatTheFp32StoreHoldsAndTheReportSaysAgainstWhat) {
  const std::vector<std::string> fp32_store = {"saved_tensors.rules=[]"};
  const MemoryReport f32 = memory_report_only(tiny_config("/nonexistent", temp_dir("precision_f32"), fp32_store));
  std::vector<std::string> bf16_sets = fp32_store;
  bf16_sets.push_back("precision=bf16");
  const MemoryReport bf16 = memory_report_only(tiny_config("/nonexistent", temp_dir("precision_bf16"), bf16_sets));
  EXPECT_EQ(f32.precision, DType::f32);
  EXPECT_EQ(bf16.precision, DType::bf16);
  // Every activation in 2 bytes; the batchnorm statistics, loss probabilities and targets stay.
  const double ratio = static_cast<double>(bf16.allocator_saved_bytes) / static_cast<double>(f32.allocator_saved_bytes);
  EXPECT_GT(ratio, 0.49);
  EXPECT_LT(ratio, 0.52);
  EXPECT_EQ(bf16.saved_fp32_bytes,
            bf16.saved_bytes);  // the FP32 store is its own AMP baseline
  EXPECT_EQ(bf16.saved_f32_bytes,
            f32.saved_fp32_bytes);  // ... and f32 training's bytes are f32's
  const std::string table = memory_report_table(bf16);
  EXPECT_NE(table.find("bf16 AMP bytes"), std::string::npos) << table;
  EXPECT_NE(table.find("with the FP32 store under bf16 autocast (the AMP "
                       "baseline): 1.00x smaller"),
            std::string::npos)
      << table;
  const Json j = memory_report_json(bf16);
  EXPECT_EQ(j.at("totals").at("precision").get<std::string>(), "bf16");

  // Compressed from bf16: ratios against the AMP baseline and against f32 both reported.
  std::vector<std::string> actnn = bf16_sets;
  actnn.push_back("saved_tensors.default={scheme: actnn, bits: 2}");
  const MemoryReport q = memory_report_only(tiny_config("/nonexistent", temp_dir("precision_actnn"), actnn));
  EXPECT_EQ(q.saved_fp32_bytes, bf16.saved_bytes);
  EXPECT_EQ(q.saved_f32_bytes, f32.saved_bytes);
  EXPECT_LT(q.saved_bytes * 4, q.saved_fp32_bytes);

  // Few-bit entries (the tiny config's 1-bit relu rule in layer2) count their 16-bit bytes too.
  const MemoryReport fewbit =
      memory_report_only(tiny_config("/nonexistent", temp_dir("precision_fewbit"), {"precision=bf16"}));
  EXPECT_EQ(fewbit.saved_fp32_bytes, bf16.saved_bytes);
  EXPECT_EQ(fewbit.saved_f32_bytes, f32.saved_bytes);

  // --benchmark says the same, labelled.
  const Json b = benchmark(tiny_config("/nonexistent", temp_dir("precision_bench"), actnn), 1).json();
  EXPECT_EQ(b.at("precision").get<std::string>(), "bf16");
  EXPECT_LT(b.at("saved_vs_fp32_store").get<double>(), 0.25);
  EXPECT_NEAR(b.at("saved_vs_f32").get<double>() * 2, b.at("saved_vs_fp32_store").get<double>(), 0.02);
}

// fp16 too: on the CPU at the kernels' edges, with its loss scale in the checkpoint.
TEST(PrecisionTrainer, Bf16AndFp16ResumeBitIdentically) {
  for (const std::string precision : {"bf16", "fp16"}) {
    const auto data = make_idx_dataset("precision_resume_" + precision, 48, 16);
    const ResumedRuns r = expect_resume_bit_identical(
        data, {"precision=" + precision, "train.steps_per_epoch=3", "saved_tensors.default={scheme: actnn, bits: 2}"},
        precision);
    EXPECT_EQ(r.straight.find("trainer.loss_scale") != nullptr, precision == "fp16") << precision;
    for (const auto& [name, x] : r.straight.tensors) {
      if (name.rfind("model.", 0) == 0 && is_floating(x.dtype())) {
        EXPECT_EQ(x.dtype(), DType::f32) << name << ": parameters and buffers stay f32 (master weights)";
      }
    }
  }
}

TEST(PrecisionTrainer, AnUnknownPrecisionIsRefusedNamingTheKeyAndTheLogSaysHowEachRuns) {
  const std::string unknown =
      message_of([] { tiny_config("/nonexistent", temp_dir("precision_bad"), {"precision=fp64"}); });
  EXPECT_NE(unknown.find("precision"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("fp64"), std::string::npos) << unknown;
  EXPECT_EQ(run_precision(tiny_config("/nonexistent", temp_dir("precision_default"))).precision, Precision::fp32);
  // The CPU has no f16 kernels: fp16 computes at the kernels' edges, with loss scaling, and says so.
  const RunPrecision fp16 = run_precision(tiny_config("/nonexistent", temp_dir("precision_fp16"), {"precision=fp16"}));
  EXPECT_EQ(fp16.precision, Precision::fp16);
  EXPECT_NE(fp16.describe.find("no f16 kernels"), std::string::npos) << fp16.describe;
  EXPECT_NE(fp16.describe.find("loss scaling"), std::string::npos) << fp16.describe;
  const RunPrecision tf32 = run_precision(tiny_config("/nonexistent", temp_dir("precision_tf32"), {"precision=tf32"}));
  EXPECT_TRUE(tf32.tf32.convolutions && tf32.tf32.matmuls);
  EXPECT_NE(tf32.describe.find("on the CPU: exact f32"), std::string::npos) << tf32.describe;
  // A run sets the GPU's TF32 use from its precision and gives the previous one back at its end.
  const Tf32Use before = tf32_use();
  {
    const RunDevice on(tiny_config("/nonexistent", temp_dir("precision_tf32_run"), {"precision=tf32"}));
    EXPECT_TRUE(tf32_use().convolutions && tf32_use().matmuls);
  }
  EXPECT_EQ(tf32_use().matmuls, before.matmuls);
  EXPECT_EQ(tf32_use().convolutions, before.convolutions);
}
