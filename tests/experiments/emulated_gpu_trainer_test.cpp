// The trainer on a device that is not the CPU, without a GPU: the emulated GPU
// (tests/support/emulated_gpu.h) runs the CPU backend's arithmetic on its own allocator, while
// host access to its tensors throws and mixing them with CPU tensors is an error. A training run
// on it that matches the CPU run bit for bit proves that the training path (model init and
// buffers, tape, FP32 store, optimizers, clipping, loss and accuracy, memory report, checkpoints,
// evaluation, the measuring modes) has no hidden host access and allocates on the run's device.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/backend.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/config.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/train_loop.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/device_step.h"
#include "tests/support/emulated_gpu.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& fixture_data() {
  static const fs::path dir = make_idx_dataset("idx_emulated", 48, 32);
  return dir;
}

const std::string kGpu = EmulatedGpu::device().str();  // "cuda:1000"

// The tiny config (ResNet-20, clipping, label smoothing, SGD with Nesterov) in FP32 storage
// (the compressing stores on the device: emulated_gpu_store_test.cpp).
Config tiny(const fs::path& out, const std::string& device, const std::vector<std::string>& more = {}) {
  std::vector<std::string> sets{"saved_tensors.rules=[]", "device=" + device, "train.epochs=1"};
  sets.insert(sets.end(), more.begin(), more.end());  // later settings win
  return tiny_config(fixture_data(), out, sets);
}

}  // namespace

TEST(EmulatedGpu, ItsTensorsRefuseHostAccessAndLiveInItsAllocator) {
  EmulatedGpu gpu;
  const int64_t before = gpu.allocator().current(MemTag::Activation);
  Tensor t = Tensor::from_vector(Shape{3}, std::vector<float>{1, 2, 3}).to(EmulatedGpu::device());
  EXPECT_EQ(gpu.allocator().current(MemTag::Activation), before + 12);
  EXPECT_EQ(message_of([&] { t.data<float>(); }),
            "data<T>(): the tensor is on cuda:1000; host access needs a CPU tensor (.to(Device::cpu()) first)");
  EXPECT_THROW(t.item(), Error);
  const Tensor sum = backend_of(t).binary(BinaryOp::Add, t, t);  // the CPU's arithmetic, on the device
  EXPECT_EQ(sum.device(), EmulatedGpu::device());
  EXPECT_EQ(sum.to(Device::cpu()).to_vector(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(t.device(), EmulatedGpu::device()) << "operands go back to the device after a call";
}

TEST(EmulatedGpu, AStepMatchesTheCpuStepExactly) {
  EmulatedGpu gpu;
  ModelSpec spec;
  spec.arch = "resnet20";
  spec.in_channels = 1;
  spec.seed = 11;
  const int64_t cpu_params = Allocator::cpu().current(MemTag::Parameter);
  const DeviceStep cpu = device_step(spec, Device::cpu(), 4, 1, 12, 12);
  const int64_t gpu_activation = gpu.allocator().current(MemTag::Activation);
  const DeviceStep dev = device_step(spec, EmulatedGpu::device(), 4, 1, 12, 12);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Parameter), cpu_params);
  EXPECT_EQ(gpu.allocator().current(MemTag::Activation), gpu_activation);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
  EXPECT_EQ(dev.loss, cpu.loss);
  ASSERT_EQ(dev.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) EXPECT_EQ(dev.grads[i].second, cpu.grads[i].second) << cpu.grads[i].first;
  ASSERT_EQ(dev.saved.size(), cpu.saved.size());
  for (size_t i = 0; i < cpu.saved.size(); ++i) {
    EXPECT_EQ(dev.saved[i].layer, cpu.saved[i].layer);
    EXPECT_EQ(dev.saved[i].bytes, cpu.saved[i].bytes) << cpu.saved[i].layer << " " << cpu.saved[i].op;
  }
}

// The other model families' ops on the device: a ViT (layernorm, attention, GELU, class-token
// narrow) gives the CPU's step exactly; an EfficientNet (depthwise convolutions, squeeze-excitation,
// SiLU, stochastic depth) runs and saves the same bytes (its drop-path masks differ: each module
// takes its Philox stream from a process-wide counter when it is built, so a second model draws
// other masks on any device).
TEST(EmulatedGpu, ViTAndEfficientNetStepsRunOnTheDevice) {
  EmulatedGpu gpu;
  for (const char* arch : {"vit_tiny_fmnist", "efficientnet_b0_small"}) {
    const bool exact = std::string(arch).starts_with("vit");
    ModelSpec spec;
    spec.arch = arch;
    spec.in_channels = 1;
    spec.image_size = 28;
    spec.seed = 2;
    const DeviceStep cpu = device_step(spec, Device::cpu(), 2, 1, 28, 28);
    const DeviceStep dev = device_step(spec, EmulatedGpu::device(), 2, 1, 28, 28);
    ASSERT_TRUE(std::isfinite(dev.loss)) << arch;
    ASSERT_EQ(dev.grads.size(), cpu.grads.size()) << arch;
    if (exact) {
      EXPECT_EQ(dev.loss, cpu.loss) << arch;
      for (size_t i = 0; i < cpu.grads.size(); ++i)
        EXPECT_EQ(dev.grads[i].second, cpu.grads[i].second) << arch << " " << cpu.grads[i].first;
    }
    ASSERT_EQ(dev.saved.size(), cpu.saved.size()) << arch;
    for (size_t i = 0; i < cpu.saved.size(); ++i)
      EXPECT_EQ(dev.saved[i].bytes, cpu.saved[i].bytes) << arch << " " << cpu.saved[i].layer << " " << cpu.saved[i].op;
    EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0) << arch;
  }
}

TEST(EmulatedGpu, ATrainingRunMatchesTheCpuRunAndResumes) {
  EmulatedGpu gpu;
  const fs::path on_cpu = temp_dir("emulated_cpu"), on_gpu = temp_dir("emulated_gpu");
  const int64_t cpu_params = Allocator::cpu().current(MemTag::Parameter);
  const RunResult a = run_training(tiny(on_cpu, "cpu"), quiet());
  const RunResult b = run_training(tiny(on_gpu, kGpu), quiet());
  ASSERT_EQ(a.epochs.size(), 1u);
  ASSERT_EQ(b.epochs.size(), 1u);
  EXPECT_EQ(b.epochs[0].train_loss, a.epochs[0].train_loss);
  EXPECT_EQ(b.epochs[0].train_acc, a.epochs[0].train_acc);
  EXPECT_EQ(b.epochs[0].test_loss, a.epochs[0].test_loss);
  EXPECT_EQ(b.epochs[0].test_acc, a.epochs[0].test_acc);
  // The memory report reads the device's allocator; the saved tensors are the CPU's, byte for byte.
  EXPECT_EQ(b.report.step.device, EmulatedGpu::device());
  EXPECT_EQ(b.report.saved_bytes, a.report.saved_bytes);
  EXPECT_EQ(b.report.allocator_saved_bytes, a.report.allocator_saved_bytes);
  EXPECT_GT(b.report.step.peak_at(MemTag::Parameter), 0);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Parameter), cpu_params) << "the model was made on the device";
  EXPECT_EQ(gpu.allocator().current(MemTag::Activation), 0);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
  // The checkpoint was copied to the host to be written: the same file content as the CPU run's.
  const SafetensorsFile fa = read_safetensors(checkpoint_path(on_cpu.string(), 1));
  const SafetensorsFile fb = read_safetensors(checkpoint_path(on_gpu.string(), 1));
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    EXPECT_EQ(fa.tensors[i].first, fb.tensors[i].first);
    EXPECT_EQ(fa.tensors[i].second.to_vector(), fb.tensors[i].second.to_vector()) << fa.tensors[i].first;
  }
  // Resuming copies it back to the device and trains on: the CPU's second epoch, exactly.
  RunOptions resume = quiet();
  resume.resume = true;
  const RunResult a2 = run_training(tiny(on_cpu, "cpu", {"train.epochs=2"}), resume);
  const RunResult b2 = run_training(tiny(on_gpu, kGpu, {"train.epochs=2"}), resume);
  ASSERT_EQ(b2.epochs.size(), 1u);
  EXPECT_EQ(b2.epochs[0].train_loss, a2.epochs[0].train_loss);
  EXPECT_EQ(b2.epochs[0].test_acc, a2.epochs[0].test_acc);
}

TEST(EmulatedGpu, AdamWAndTheMeasuringModesRunOnTheDevice) {
  EmulatedGpu gpu;
  const std::vector<std::string> adamw{"optimizer={name: adamw, lr: 0.001}", "data.batch_size=8"};
  const BenchmarkResult cpu = benchmark(tiny("/tmp/unused", "cpu", adamw), 2);
  const BenchmarkResult dev = benchmark(tiny("/tmp/unused", kGpu, adamw), 2);
  EXPECT_EQ(dev.device, kGpu);
  EXPECT_EQ(parse_json(dev.json().dump()).at("device").get<std::string>(), kGpu);
  EXPECT_EQ(dev.saved_bytes, cpu.saved_bytes);
  const MemoryReport report = memory_report_only(tiny(temp_dir("emulated_report"), kGpu));
  EXPECT_EQ(report.step.device, EmulatedGpu::device());
  EXPECT_NE(memory_report_table(report).find("on cuda:1000"), std::string::npos);
  // --find-max-batch sets its limit on the device's allocator: batch 64 cannot fit in 8 MiB of it
  // (a search that read the CPU's allocator would see only the host batches and fit them all).
  const int64_t held = gpu.allocator().total_current();
  const MaxBatchResult m = find_max_batch(tiny("/tmp/unused", kGpu), held + (int64_t{8} << 20), 64);
  EXPECT_GT(m.batch_size, 0);
  EXPECT_LT(m.batch_size, 64);
  EXPECT_LE(m.peak_bytes, held + (int64_t{8} << 20));
  EXPECT_EQ(gpu.allocator().limit(), 0);
}

TEST(EmulatedGpu, GradientFidelityRunsOnTheDevice) {
  EmulatedGpu gpu;
  const fs::path out = temp_dir("emulated_fidelity");
  // FP32 against FP32: every draw is the reference gradient.
  const FidelityReport r = gradient_fidelity_mode(tiny(out, kGpu), 2);
  EXPECT_NEAR(r.total.cosine, 1.0, 1e-12);
}

// A GPT on bytes (embeddings, positions made on the host and copied, causal attention, token
// batches and the (N, T, V) accuracy), AdamW and clipping: one epoch equals the CPU's.
TEST(EmulatedGpu, AGptTextRunMatchesTheCpuRun) {
  EmulatedGpu gpu;
  auto config = [](const fs::path& out, const std::string& device) {
    const std::string yaml = "seed: 2\ndevice: " + device + "\n"
                             "data: {dataset: text, root: \"" + std::string(PACKRAT_SOURCE_DIR) +
                             "/tests/data/text/gpl3_excerpt.txt\", seq_len: 16, batch_size: 4, eval_batch_size: 8, "
                             "limit_test: 16}\n"
                             "model: {arch: gpt_tiny}\n"
                             "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
                             "train: {epochs: 1, steps_per_epoch: 3, clip_grad_norm: 1.0}\n"
                             "output: {dir: \"" + out.string() + "\", checkpoint_interval: 0}\n";
    return parse_config(yaml, "text.yaml", {});
  };
  const RunResult a = run_training(config(temp_dir("emulated_text_cpu"), "cpu"), quiet());
  const RunResult b = run_training(config(temp_dir("emulated_text_gpu"), kGpu), quiet());
  ASSERT_EQ(b.epochs.size(), 1u);
  EXPECT_EQ(b.epochs[0].train_loss, a.epochs[0].train_loss);
  EXPECT_EQ(b.epochs[0].train_acc, a.epochs[0].train_acc);
  EXPECT_EQ(b.epochs[0].test_loss, a.epochs[0].test_loss);
  EXPECT_EQ(b.report.saved_bytes, a.report.saved_bytes);
}

// GACT's L2 (gact-L2: gact-L1's storage, every saved tensor offloaded) trains as gact-L1 does, bit
// for bit, with the saved bytes in the host pool after the forward and back for the backward;
// the resolved config keeps memory.offload; on the CPU the preset is refused naming it.
TEST(EmulatedGpu, GactL2TrainsAsGactL1WithItsSavedTensorsOnTheHost) {
  EmulatedGpu gpu;
  const fs::path l1_dir = temp_dir("emulated_gact_l1"), l2_dir = temp_dir("emulated_gact_l2");
  const RunResult a = run_training(tiny(l1_dir, kGpu, {"saved_tensors.default=gact-L1"}), quiet());
  const RunResult b = run_training(tiny(l2_dir, kGpu, {"saved_tensors.default=gact-L2"}), quiet());
  ASSERT_EQ(b.epochs.size(), 1u);
  EXPECT_EQ(b.epochs[0].train_loss, a.epochs[0].train_loss);
  EXPECT_EQ(b.epochs[0].test_acc, a.epochs[0].test_acc);
  EXPECT_FALSE(a.report.offload.on);
  ASSERT_TRUE(b.report.offload.on);
  EXPECT_EQ(b.report.saved_bytes, a.report.saved_bytes);
  EXPECT_EQ(b.report.offload.device_saved, 0);
  EXPECT_EQ(b.report.offload.host_saved, a.report.allocator_saved_bytes);
  EXPECT_EQ(b.report.allocator_saved_bytes, a.report.allocator_saved_bytes) << "device and host together";
  // The step's own forward, and GACT's sensitivity passes before it (the first step adapts): all
  // offloaded; back, what a backward read (a node no gradient reaches releases its tensors unread).
  EXPECT_GT(b.report.offload.moved.bytes_to_host, b.report.offload.host_saved);
  EXPECT_LE(b.report.offload.moved.bytes_to_device, b.report.offload.moved.bytes_to_host);
  EXPECT_GT(b.report.offload.moved.bytes_to_device, b.report.offload.moved.bytes_to_host * 9 / 10);
  EXPECT_EQ(b.report.offload.moved.synchronous_loads, 0);
  EXPECT_GE(b.report.offload.host_pool_bytes, b.report.offload.host_peak);
  EXPECT_LT(b.report.step.peak_at(MemTag::Saved), a.report.step.peak_at(MemTag::Saved));
  const std::string table = memory_report_table(b.report);
  EXPECT_NE(table.find("Offload (memory.offload)"), std::string::npos) << table;
  const Json j = parse_json(read_text(fs::path(b.run_dir) / "memory_report.json"));
  EXPECT_EQ(j.at("offload").at("host_saved_bytes").get<int64_t>(), b.report.offload.host_saved);
  EXPECT_GT(j.at("offload").at("layers").size(), 5u);

  // A rule of its own, written back in the resolved config, read again as it was.
  const Config c = tiny(temp_dir("emulated_offload_rule"), kGpu,
                        {"memory.offload={ops: [conv2d], layers: [\"layer3.*\"], min_bytes: 4096, prefetch: 3, "
                         "in_flight_bytes: 1048576}"});
  ASSERT_TRUE(c.memory.offload.has_value());
  const Config again = parse_config(config_to_yaml(c), "resolved.yaml");
  ASSERT_TRUE(again.memory.offload.has_value());
  EXPECT_EQ(again.memory.offload->ops, std::vector<std::string>{"conv2d"});
  EXPECT_EQ(again.memory.offload->layers, std::vector<std::string>{"layer3.*"});
  EXPECT_EQ(again.memory.offload->min_bytes, 4096);
  EXPECT_EQ(again.memory.offload->prefetch, 3);
  EXPECT_EQ(again.memory.offload->in_flight_bytes, 1048576);
  EXPECT_EQ(OffloadRule{}.in_flight_bytes, int64_t{256} << 20) << "the default the README gives";
  const RunResult r = run_training(c, quiet());
  int64_t host = 0;
  for (const auto& [layer, bytes] : r.report.offload.host_by_layer) {
    if (bytes > 0) {
      EXPECT_EQ(layer.rfind("layer3.", 0), 0u) << layer;
    }
    host += bytes;
  }
  EXPECT_GT(host, 0);

  EXPECT_NE(message_of([&] { run_training(tiny(temp_dir("cpu_gact_l2"), "cpu", {"saved_tensors.default=gact-L2"}), quiet()); })
                .find("(preset gact-L2) moves saved tensors to host memory, but the device is the CPU"),
            std::string::npos);
}

// The lever: in one budget of the device's memory, offload fits a larger batch than compression
// alone, and offloading FP32 tensors (the plain swap) a larger one than keeping them.
TEST(EmulatedGpu, OffloadFitsALargerBatchInTheSameDeviceBudget) {
  EmulatedGpu gpu;
  const int64_t held = gpu.allocator().total_current();
  const int64_t budget = held + (int64_t{6} << 20);
  auto max_batch = [&](const std::vector<std::string>& sets) {
    return find_max_batch(tiny("/tmp/unused", kGpu, sets), budget, 512).batch_size;
  };
  const int64_t l0 = max_batch({"saved_tensors.default=gact-L0"});
  const int64_t swap = max_batch({"saved_tensors.default=gact-L0", "memory.offload={}"});
  const int64_t l1 = max_batch({"saved_tensors.default={scheme: gact-L1, tensors_per_refresh: 2}"});
  const int64_t l2 = max_batch({"saved_tensors.default={scheme: gact-L2, tensors_per_refresh: 2}"});
  EXPECT_GT(l0, 0);
  EXPECT_GT(swap, l0);
  EXPECT_GT(l1, l0);
  EXPECT_GT(l2, l1);
  EXPECT_EQ(gpu.allocator().limit(), 0);
}
