// Training with compressed saved tensors on a device. Without a GPU: on the emulated GPU
// (tests/support/emulated_gpu.h; its codec kernels are the CPU's), a ResNet-20 epoch with actnn
// 2-bit and with few-bit 3-bit storage gives the CPU run's losses exactly and a memory report
// with the CPU's bytes for every saved tensor. With a GPU (skip without one): the same configs on
// cuda:0 give the CPU's bytes per saved tensor and track its loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/backend.h"
#include "experiments/lib/run.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/emulated_gpu.h"
#include "tests/experiments/run_files.h"
#include "tests/support/gpu.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& fixture_data() {
  static const fs::path dir = make_idx_dataset("idx_emulated_store", 48, 32);
  return dir;
}

// The tiny config (ResNet-20, SGD with Nesterov, label smoothing, clipping) with `storage` for
// every saved tensor, one epoch on `device`.
Config tiny(const std::string& name, const std::string& device, const std::string& storage,
            const std::vector<std::string>& more = {}) {
  std::vector<std::string> sets{"saved_tensors.rules=[]", "saved_tensors.default=" + storage, "device=" + device,
                                "train.epochs=1"};
  sets.insert(sets.end(), more.begin(), more.end());
  return tiny_config(fixture_data(), temp_dir(name), sets);
}

struct StorageConfig {
  const char* name;
  std::string scheme_name;
  std::string scheme;
  std::vector<std::string> more;  // few-bit GELU: a table, not only relu's step masks
};

std::vector<StorageConfig> storages() {
  return {{"actnn2", "actnn", "{scheme: actnn, bits: 2}", {}},
          {"fewbit3", "fewbit", "{scheme: fewbit, bits: 3}", {"model.activation=gelu"}},
          {"mixed24", "mixed", "{scheme: mixed, preset: \"2/4@0.5\"}", {}},
          {"deterministic4", "deterministic", "{scheme: deterministic, bits: 4}", {}}};
}

// Every saved tensor of the first step: the same layer, op, scheme and bytes.
void expect_same_tensors(const MemoryReport& dev, const MemoryReport& cpu, const std::string& what) {
  ASSERT_EQ(dev.tensors.size(), cpu.tensors.size()) << what;
  for (size_t i = 0; i < cpu.tensors.size(); ++i) {
    const SavedRecord &a = dev.tensors[i], &b = cpu.tensors[i];
    EXPECT_EQ(a.layer, b.layer) << what << " " << i;
    EXPECT_EQ(a.op, b.op) << what << " " << b.layer;
    EXPECT_EQ(a.scheme, b.scheme) << what << " " << b.layer << " " << b.op;
    EXPECT_EQ(a.bytes, b.bytes) << what << " " << b.layer << " " << b.op;
    EXPECT_EQ(a.bits, b.bits) << what << " " << b.layer << " " << b.op;
  }
  EXPECT_EQ(dev.saved_bytes, cpu.saved_bytes) << what;
  EXPECT_EQ(dev.allocator_saved_bytes, cpu.allocator_saved_bytes) << what << ": the device allocator's Saved tag";
}

}  // namespace

TEST(EmulatedGpu, CompressedTrainingRunsMatchTheCpuRuns) {
  EmulatedGpu gpu;
  const std::string dev = EmulatedGpu::device().str();
  for (const StorageConfig& s : storages()) {
    const RunResult a = run_training(tiny(std::string(s.name) + "_cpu", "cpu", s.scheme, s.more), quiet());
    const RunResult b = run_training(tiny(std::string(s.name) + "_dev", dev, s.scheme, s.more), quiet());
    ASSERT_EQ(b.epochs.size(), 1u) << s.name;
    EXPECT_EQ(b.epochs[0].train_loss, a.epochs[0].train_loss) << s.name;
    EXPECT_EQ(b.epochs[0].train_acc, a.epochs[0].train_acc) << s.name;
    EXPECT_EQ(b.epochs[0].test_loss, a.epochs[0].test_loss) << s.name;
    EXPECT_EQ(b.report.step.device, EmulatedGpu::device());
    expect_same_tensors(b.report, a.report, s.name);
    // The scheme really compressed on the device: below FP32 (few-bit keeps only activations).
    EXPECT_LT(b.report.saved_bytes, b.report.saved_fp32_bytes) << s.name;
    int compressed = 0;
    for (const SavedRecord& r : b.report.tensors) compressed += r.scheme == s.scheme_name;
    EXPECT_GT(compressed, 10) << s.name;
    EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0) << s.name;
    EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), 0) << s.name;
  }
}

TEST(CudaTrainer, CompressedTrainingRunsMatchTheCpuRunsBytesAndTrackTheirLoss) {
  PACKRAT_SKIP_WITHOUT_GPU();
  for (const StorageConfig& s : storages()) {
    const RunResult a = run_training(tiny(std::string(s.name) + "_cpu", "cpu", s.scheme, s.more), quiet());
    const RunResult b = run_training(tiny(std::string(s.name) + "_gpu", "cuda:0", s.scheme, s.more), quiet());
    ASSERT_EQ(b.epochs.size(), 1u) << s.name;
    EXPECT_EQ(b.report.step.device, Device::cuda(0));
    expect_same_tensors(b.report, a.report, s.name);
    // Three SGD steps: rounding differences of the GPU's arithmetic stay small.
    EXPECT_NEAR(b.epochs[0].train_loss, a.epochs[0].train_loss, 1e-2 * a.epochs[0].train_loss) << s.name;
    EXPECT_TRUE(std::isfinite(b.epochs[0].test_loss)) << s.name;
    EXPECT_EQ(Allocator::of(Device::cuda(0)).current(MemTag::Saved), 0) << s.name;
  }
}
