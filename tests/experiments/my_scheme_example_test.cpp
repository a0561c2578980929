// The README's "your own scheme" path, followed as a user would: examples/my_scheme is a
// program that registers a "bf16" store and then runs the trainer (experiments/lib/trainer_main.h).
// Run on a tiny config with --memory-report-only, its memory report must name the new scheme
// and count 2 bytes per element held, half the FP32 bytes. The store is written on
// CompressingStore (quant/store/compressing_store.h), so what the base adds shows too: ReLU's saves are
// exact 1-bit masks; and training with it follows FP32 training closely.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/lib/json.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

// build/bin/my_scheme beside this test binary.
fs::path example_binary(const std::string& name) {
  return fs::read_symlink("/proc/self/exe").parent_path() / name;
}

// Runs build/bin/my_scheme on the tiny config (ResNet-20) in dir with these extra arguments;
// its output is dir/out.txt.
void run_example(const fs::path& dir, const fs::path& data, const std::string& args) {
  const fs::path bin = example_binary("my_scheme");
  ASSERT_TRUE(fs::exists(bin)) << bin << " is not built (CMakeLists.txt builds examples/*/ with the tests)";
  std::ofstream(dir / "tiny.yaml") << tiny_yaml(data, dir / "run");
  const std::string cmd = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.rules=[]' " + args + " > " + (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "out.txt");
}

// The train_loss column of a run's steps.csv (step,epoch,train_loss,train_acc,lr), one per step.
std::vector<double> step_losses(const fs::path& run) {
  std::istringstream in(read_text(run / "steps.csv"));
  std::vector<double> losses;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (int i = 0; i < 3; ++i) std::getline(cells, cell, ',');
    losses.push_back(std::stod(cell));
  }
  return losses;
}

}  // namespace

TEST(MySchemeExample, RegistersItsSchemeAndTrainsWithIt) {
  const fs::path bin = example_binary("my_scheme");
  ASSERT_TRUE(fs::exists(bin)) << bin << " is not built (CMakeLists.txt builds examples/*/ with the tests)";
  const fs::path dir = temp_dir("my_scheme");
  {
    std::ofstream cfg(dir / "tiny.yaml");
    cfg << tiny_yaml(dir / "no_data_needed", dir / "run");
  }
  const std::string cmd = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.default={scheme: bf16}' --set 'saved_tensors.rules=[]'" +
                          " --memory-report-only > " + (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "out.txt");
  const Json report = parse_json(read_text(dir / "run" / "memory_report.json"), "memory_report.json");
  int64_t bf16_tensors = 0, bf16_bytes = 0, bf16_fp32 = 0;
  for (const Json& t : report.at("tensors")) {
    if (t.at("scheme").get<std::string>() != "bf16") continue;
    if (t.at("op").get<std::string>() == "relu") continue;  // ReLU's derivative: a 1-bit mask, not bf16 (below)
    ++bf16_tensors;
    const int64_t bytes = json_integer(t.at("bytes")), fp32 = json_integer(t.at("fp32_bytes"));
    EXPECT_EQ(t.at("bits").get<double>(), 16.0);
    if (fp32 == 0) continue;  // a buffer saved by two ops counts once
    // 2 bytes per element, plus at most the allocator's rounding of one block.
    EXPECT_GE(bytes, fp32 / 2) << t.at("layer").get<std::string>();
    EXPECT_LT(bytes, fp32 / 2 + 256) << t.at("layer").get<std::string>();
    bf16_bytes += bytes;
    bf16_fp32 += fp32;
  }
  EXPECT_GT(bf16_tensors, 20);  // every conv, batchnorm and linear input of ResNet-20
  EXPECT_NEAR(static_cast<double>(bf16_bytes) / static_cast<double>(bf16_fp32), 0.5, 0.01);
  // An option the scheme does not read is an error naming it, exit code 2.
  const std::string bad = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.default={scheme: bf16, bits: 3}' --memory-report-only > " +
                          (dir / "bad.txt").string() + " 2>&1";
  const int status = std::system(bad.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(read_text(dir / "bad.txt").find("unknown key 'bits'"), std::string::npos) << read_text(dir / "bad.txt");
}

// The bf16 codec is asked only for what it is for. ReLU's derivative is a step, so the base keeps
// it as an exact 1-bit mask, numel / 8 bytes as the allocator holds them, not 16-bit values; a
// convolution's f32 input goes through the codec, 2 bytes an element, half its FP32 bytes.
TEST(MySchemeExample, ReluSavesAreExactOneBitMasksAndConvInputsAreBf16) {
  const fs::path dir = temp_dir("my_scheme_masks");
  run_example(dir, dir / "no_data_needed", "--set 'saved_tensors.default={scheme: bf16}' --memory-report-only");
  const Json report = parse_json(read_text(dir / "run" / "memory_report.json"), "memory_report.json");
  int relus = 0, convs = 0;
  for (const Json& t : report.at("tensors")) {
    const std::string op = t.at("op").get<std::string>(), layer = t.at("layer").get<std::string>();
    const int64_t bytes = json_integer(t.at("bytes")), numel = json_integer(t.at("numel"));
    if (op == "relu") {
      ++relus;
      EXPECT_EQ(t.at("scheme").get<std::string>(), "bf16") << layer;
      EXPECT_EQ(t.at("need").get<std::string>(), "derivative") << layer;
      EXPECT_EQ(t.at("bits").get<double>(), 1.0) << layer;
      EXPECT_GE(bytes, (numel + 7) / 8) << layer;  // plus at most the allocator's rounding
      EXPECT_LT(bytes, (numel + 7) / 8 + 256) << layer;
    } else if (op == "conv2d") {
      ++convs;
      EXPECT_EQ(t.at("scheme").get<std::string>(), "bf16") << layer;
      EXPECT_EQ(t.at("bits").get<double>(), 16.0) << layer;
      // The FP32 store would hold 4 * numel bytes (the report counts them once, at the ReLU
      // that saved the same buffer first).
      EXPECT_GE(bytes, 2 * numel) << layer;
      EXPECT_LT(bytes, 2 * numel + 256) << layer;
    }
  }
  EXPECT_EQ(relus, 19);  // ResNet-20: the stem's, and two in each of 9 blocks
  EXPECT_EQ(convs, 19);
  // The report's bytes are the bytes the allocator holds under the Saved tag.
  EXPECT_EQ(json_integer(report.at("totals").at("saved_bytes")),
            json_integer(report.at("totals").at("allocator_saved_bytes")));
}

// Four SGD steps (64 images, batches of 16) with saved activations in bf16 track FP32's losses:
// the first is the same (saving does not touch the forward pass), the others differ, as the
// backward reads bf16 values, but by far less than the 0.06 that training moves the loss. (The
// difference depends on the build's floating-point choices: up to 0.011 under scripts/sanitize.sh's
// -O1 build, hence the 0.025.)
TEST(MySchemeExample, TrainingLossStaysCloseToFp32) {
  const fs::path data = make_idx_dataset("my_scheme_loss", 64, 32);
  const fs::path fp32 = temp_dir("my_scheme_fp32"), bf16 = temp_dir("my_scheme_bf16");
  const std::string steps = " --set train.epochs=1 --set train.log_interval=1";
  run_example(fp32, data, "--set saved_tensors.default=fp32" + steps);
  run_example(bf16, data, "--set 'saved_tensors.default={scheme: bf16}'" + steps);
  const std::vector<double> a = step_losses(fp32 / "run"), b = step_losses(bf16 / "run");
  ASSERT_EQ(a.size(), 4u) << read_text(fp32 / "run" / "steps.csv");
  ASSERT_EQ(b.size(), 4u) << read_text(bf16 / "run" / "steps.csv");
  EXPECT_EQ(a[0], b[0]);
  bool differs = false;
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 0.025) << "step " << i + 1;
    differs = differs || a[i] != b[i];
  }
  EXPECT_TRUE(differs) << "the bf16 run's backward read FP32 values";
}
