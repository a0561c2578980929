// Training on a real GPU against the CPU: a ResNet-20 and a ResNet-18 step (loss, gradients, the
// saved bytes of every tensor), memory after a step and over 100 steps, OutOfMemory naming the
// layer and tag, a short trainer run. Compiled always; each test skips with a one-line reason
// when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/build_config.h"
#include "core/device_runtime.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/safetensors.h"
#include "layers/conv2d.h"
#include "optim/sgd.h"
#include "tests/support/gradcheck.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/device_step.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const Device kGpu = Device::cuda(0);

// How close a GPU step must come to the CPU's: the loss's relative error, every parameter
// gradient's least cosine. f32: issue 10's; bf16 rounds different sums on each side.
struct StepTolerance {
  double loss = 1e-4;
  double cosine = 0.9999;
};

// The step on the GPU against the CPU, as issue 10 asks: loss within tolerance.loss relative,
// every parameter gradient at cosine above tolerance.cosine, the same bytes for every saved
// tensor. The GPU's step is left in *gpu_out when given, for a caller's own checks.
void expect_step_matches_cpu(const ModelSpec& spec, int64_t n, int64_t c, int64_t h, int64_t w,
                             StepTolerance tolerance = {}, DeviceStep* gpu_out = nullptr) {
  const DeviceStep cpu = device_step(spec, Device::cpu(), n, c, h, w);
  const DeviceStep gpu = device_step(spec, kGpu, n, c, h, w);
  EXPECT_NEAR(gpu.loss, cpu.loss, tolerance.loss * std::abs(cpu.loss));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  double worst = 1;
  std::string worst_name;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    const double cos = cosine(gpu.grads[i].second, cpu.grads[i].second);
    if (cos < worst) worst = cos, worst_name = cpu.grads[i].first;
  }
  EXPECT_GT(worst, tolerance.cosine) << "gradient of " << worst_name;
  ASSERT_EQ(gpu.saved.size(), cpu.saved.size());
  for (size_t i = 0; i < cpu.saved.size(); ++i)
    EXPECT_EQ(gpu.saved[i].bytes, cpu.saved[i].bytes) << cpu.saved[i].layer << " " << cpu.saved[i].op;
  if (gpu_out) *gpu_out = gpu;
}

}  // namespace

TEST(CudaTrainer, ResNet20StepMatchesTheCpuStep) {
  PACKRAT_SKIP_WITHOUT_GPU();
  ModelSpec spec;
  spec.arch = "resnet20";
  spec.in_channels = 1;
  spec.seed = 3;
  expect_step_matches_cpu(spec, 32, 1, 28, 28);
}

TEST(CudaTrainer, ResNet18StepMatchesTheCpuStep) {
  PACKRAT_SKIP_WITHOUT_GPU();
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.stem = "cifar";
  spec.activation = "gelu";
  spec.seed = 3;
  expect_step_matches_cpu(spec, 16, 3, 32, 32);
}

// bf16 autocast on the GPU (cuDNN's bf16 convolutions; linear layers on TF32 at the kernels'
// edges) against the CPU's bf16 step: the loss and every gradient within bf16's rounding, which
// each side applies to different sums, and the same (bf16) bytes saved.
TEST(CudaTrainer, Bf16StepsMatchTheCpusBf16Steps) {
  PACKRAT_SKIP_WITHOUT_GPU();
  for (const char* arch : {"resnet18", "vit_tiny_fmnist"}) {
    SCOPED_TRACE(arch);
    ModelSpec spec;
    spec.arch = arch;
    spec.seed = 3;
    const bool vit = std::string(arch).starts_with("vit");
    if (vit) spec.in_channels = 1, spec.image_size = 28;
    else spec.stem = "cifar", spec.activation = "gelu";
    const AutocastScope bf16(DType::bf16);
    const int64_t c = vit ? 1 : 3, hw = vit ? 28 : 32;
    DeviceStep gpu;
    expect_step_matches_cpu(spec, 8, c, hw, hw, StepTolerance{1e-2, 0.99}, &gpu);
    const int64_t bf16_saves = std::count_if(gpu.saved.begin(), gpu.saved.end(),
                                             [](const SavedRecord& r) { return r.dtype == DType::bf16; });
    EXPECT_GT(bf16_saves, 0) << "the convolutions' and linear layers' inputs are saved in bf16";
  }
}

// The other model families on the GPU against the CPU: a ViT (layernorm, attention, GELU, the
// class token) at the ResNet steps' tolerances; an EfficientNet (depthwise convolutions,
// squeeze-excitation, SiLU, stochastic depth) runs and saves the same bytes (its drop-path masks
// differ between two builds of the model on any device: tests/experiments/emulated_gpu_trainer_test.cpp).
TEST(CudaTrainer, ViTAndEfficientNetStepsMatchTheCpuStep) {
  PACKRAT_SKIP_WITHOUT_GPU();
  for (const char* arch : {"vit_tiny_fmnist", "efficientnet_b0_small"}) {
    SCOPED_TRACE(arch);
    ModelSpec spec;
    spec.arch = arch;
    spec.in_channels = 1;
    spec.image_size = 28;
    spec.seed = 2;
    if (std::string(arch).starts_with("vit")) {
      expect_step_matches_cpu(spec, 4, 1, 28, 28);
      continue;
    }
    const DeviceStep cpu = device_step(spec, Device::cpu(), 4, 1, 28, 28);
    const DeviceStep gpu = device_step(spec, kGpu, 4, 1, 28, 28);
    EXPECT_TRUE(std::isfinite(gpu.loss));
    EXPECT_EQ(gpu.grads.size(), cpu.grads.size());
    ASSERT_EQ(gpu.saved.size(), cpu.saved.size());
    for (size_t i = 0; i < cpu.saved.size(); ++i)
      EXPECT_EQ(gpu.saved[i].bytes, cpu.saved[i].bytes) << cpu.saved[i].layer << " " << cpu.saved[i].op;
  }
}

// A convolution weight made on the GPU is kept in the layout cuDNN reads (KRSC: no reorder of it
// or of its gradient in a step) with the CPU's values; its gradient and SGD's momentum follow it,
// and a checkpoint written from it holds plain OIHW weights that load back bit for bit.
TEST(CudaTrainer, ConvolutionWeightsKeepTheGpusLayoutWithTheCpusValues) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const ConvConfig cfg{.stride = 1, .padding = 1, .dilation = 1, .groups = 1, .bias = true};
  Conv2d on_cpu(8, 16, 3, cfg, 7);
  const Tensor x = random_tensor({2, 8, 6, 6}, 3);  // (N, Cin, H, W), host
  DeviceScope on(kGpu);
  Conv2d conv(8, 16, 3, cfg, 7);
  const Layout kept = backend(kGpu).conv_weight_layout();
  EXPECT_EQ(conv.weight().layout(), kept);
  EXPECT_EQ(conv.weight().to(Device::cpu()).to_vector(), on_cpu.weight().to_vector());
  Tensor y = conv(x.to(kGpu));
  {
    TagScope tag(MemTag::Gradient);
    backward(y, Tensor::full(y.shape(), 1.0f).to(kGpu));
  }
  ASSERT_TRUE(conv.weight().grad().defined());
  EXPECT_EQ(conv.weight().grad().layout(), kept);
  // The CPU's gradient of the same sum.
  Tensor y_cpu;
  {
    DeviceScope host(Device::cpu());
    y_cpu = on_cpu(x);
    TagScope tag(MemTag::Gradient);
    backward(y_cpu, Tensor::full(y_cpu.shape(), 1.0f));
  }
  EXPECT_GT(cosine(conv.weight().grad().to(Device::cpu()).to_vector(), on_cpu.weight().grad().to_vector()), 0.9999);
  SGD opt(conv.named_parameters(), SgdOptions{0.1, 0.9});
  opt.step();
  const std::vector<float> stepped = conv.weight().to(Device::cpu()).to_vector();
  const fs::path file = temp_dir("cuda_conv_layout") / "epoch_0001.safetensors";
  save_checkpoint(file.string(), conv, opt, TrainingPosition{1, 1, 7}, "conv");
  const SafetensorsFile saved = read_safetensors(file.string());
  const Tensor* w = saved.find("model.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->layout(), Layout::Plain);
  EXPECT_EQ(w->to_vector(), stepped);
  Conv2d fresh(8, 16, 3, cfg, 99);
  SGD fresh_opt(fresh.named_parameters(), SgdOptions{0.1, 0.9});
  load_checkpoint(file.string(), fresh, fresh_opt);
  EXPECT_EQ(fresh.weight().layout(), kept);
  EXPECT_EQ(fresh.weight().to(Device::cpu()).to_vector(), stepped);
}

TEST(CudaTrainer, NothingIsLeftAfterAStepAndMemoryDoesNotGrowOver100Steps) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]", "device=cuda:0"});
  apply_process_settings(c);
  const RunDevice on(c);
  Session s = make_session(c, synthetic_input_spec(c));
  const SyntheticBatch b = synthetic_inputs(c, s.input, 16);
  Allocator& gpu = Allocator::of(kGpu);
  int64_t held_after_first = 0, reserved_after_second = 0;
  for (int64_t step = 0; step < 100; ++step) {
    const StepResult r = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, step, {});
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << step;
    ASSERT_EQ(gpu.current(MemTag::Activation), 0) << "step " << step;
    ASSERT_EQ(gpu.current(MemTag::Saved), 0) << "step " << step;
    if (step == 0) held_after_first = gpu.total_current();  // parameters and the momentum buffers
    if (step == 1) reserved_after_second = gpu.total_current() + gpu.cached_bytes();
  }
  EXPECT_EQ(gpu.total_current(), held_after_first);
  EXPECT_EQ(gpu.total_current() + gpu.cached_bytes(), reserved_after_second) << "the block cache grew";
}

TEST(CudaTrainer, OutOfGpuMemoryNamesTheLayerAndTag) {
  PACKRAT_SKIP_WITHOUT_GPU();
  LayerScope layer("layer4.1.conv2");
  // More than any GPU has: cudaMalloc refuses, even after the allocator empties its cache.
  const std::string m = message_of([] {
    Tensor::empty({int64_t{1} << 45}, DType::f32, Layout::Plain, MemTag::Activation, kGpu);
  });
  EXPECT_TRUE(m.starts_with("out of memory on cuda:0: the device refused 140737488355328 bytes of Activation for "
                            "layer 'layer4.1.conv2'")) << m;
  // --find-max-batch's limit is the device allocator's.
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules=[]", "device=cuda:0"});
  const int64_t held = Allocator::of(kGpu).total_current();
  const MaxBatchResult r = find_max_batch(c, held + (int64_t{8} << 20), 256);
  EXPECT_GT(r.batch_size, 0);
  EXPECT_LT(r.batch_size, 256);
  EXPECT_EQ(Allocator::of(kGpu).limit(), 0);
}

// conv_algorithm: deterministic takes only the cuDNN algorithms marked deterministic (and every
// packrat kernel sums in a fixed order): the same run twice gives the same losses bit for bit.
TEST(CudaTrainer, DeterministicConvolutionsRepeatARunBitForBit) {
  PACKRAT_SKIP_WITHOUT_GPU();
  static const fs::path data = make_idx_dataset("idx_cuda_deterministic", 96, 64);
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  const ConvAlgorithm before = conv_algorithm_setting();
  auto run = [&](const std::string& name) {
    return run_training(tiny_config(data, temp_dir(name), {"saved_tensors.rules=[]", "train.epochs=2", "device=cuda:0",
                                                           "conv_algorithm=deterministic"}),
                        o);
  };
  const RunResult a = run("cuda_deterministic_a"), b = run("cuda_deterministic_b");
  set_conv_algorithm(before);
  ASSERT_EQ(a.epochs.size(), 2u);
  ASSERT_EQ(b.epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(a.epochs[e].train_loss, b.epochs[e].train_loss) << "epoch " << e;
    EXPECT_EQ(a.epochs[e].test_loss, b.epochs[e].test_loss) << "epoch " << e;
  }
}

TEST(CudaTrainer, AShortRunTracksTheCpuRun) {
  PACKRAT_SKIP_WITHOUT_GPU();
  static const fs::path data = make_idx_dataset("idx_cuda", 96, 64);
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  // precision: fp32, so that the GPU's convolutions are exact f32 too (its default is TF32's).
  const std::vector<std::string> sets{"saved_tensors.rules=[]", "train.epochs=2", "precision=fp32"};
  auto with = [&](const std::string& device) {
    std::vector<std::string> s = sets;
    s.push_back("device=" + device);
    return tiny_config(data, temp_dir("cuda_run_" + device.substr(0, 3)), s);
  };
  const RunResult cpu = run_training(with("cpu"), o);
  const RunResult gpu = run_training(with("cuda:0"), o);
  ASSERT_EQ(gpu.epochs.size(), 2u);
  EXPECT_EQ(gpu.report.step.device, kGpu);
  EXPECT_EQ(gpu.report.saved_bytes, cpu.report.saved_bytes);
  // Over a dozen SGD steps rounding differences grow (the single step above is held to 1e-4).
  EXPECT_NEAR(gpu.epochs[0].train_loss, cpu.epochs[0].train_loss, 1e-2 * cpu.epochs[0].train_loss);
  EXPECT_TRUE(std::isfinite(gpu.epochs[1].test_loss));
  EXPECT_NE(pinned_host_allocator(kGpu), nullptr);
}

// Offload on the GPU's copy streams: gact-L2 steps give gact-L1's losses bit for bit (the copies
// move bytes, and each load waits for its own; deterministic convolutions, since cuDNN's fastest
// backward ones add in a varying order: without, the losses parted by 1e-5 from the second step
// on an H200), the saved bytes sit in the host pool after the
// forward, nothing is left on either side after a step, and neither side grows over 50 steps.
TEST(CudaTrainer, GactL2StepsAreGactL1StepsWithTheSavedTensorsOnTheHost) {
  PACKRAT_SKIP_WITHOUT_GPU();
  auto run = [](const std::string& level, std::vector<StepResult>& out) {
    const Config c = tiny_config("/nonexistent", "/tmp/unused",
                                 {"saved_tensors.rules=[]", "device=cuda:0", "conv_algorithm=deterministic",
                                  "saved_tensors.default=" + level});
    apply_process_settings(c);
    const RunDevice on(c);
    Session s = make_session(c, synthetic_input_spec(c));
    const SyntheticBatch b = synthetic_inputs(c, s.input, 16);
    StepOptions o;
    for (int64_t step = 0; step < 50; ++step) {
      o.capture_saved = step == 0;
      out.push_back(train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, step, o));
      ASSERT_EQ(Allocator::of(kGpu).current(MemTag::Saved), 0) << level << " step " << step;
      if (CopyEngine* e = backend(kGpu).copy_engine()) {
        ASSERT_EQ(e->host_pool().current(MemTag::Saved), 0) << level << " step " << step;
      }
    }
  };
  std::vector<StepResult> l1, l2;
  run("gact-L1", l1);
  run("gact-L2", l2);
  ASSERT_EQ(l2.size(), l1.size());
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_EQ(l2[i].loss, l1[i].loss) << "step " << i;
  ASSERT_TRUE(l2[0].offload.on);
  EXPECT_EQ(l2[0].offload.device_saved, 0);
  EXPECT_EQ(l2[0].offload.host_saved, l1[0].saved_allocator_bytes);
  EXPECT_EQ(l2[0].offload.pageable_bytes, 0) << "page-locked memory was refused";
  EXPECT_EQ(l2.back().offload.moved.synchronous_loads, 0);
  EXPECT_EQ(l2.back().offload.host_pool_bytes, l2[5].offload.host_pool_bytes) << "the host pool grew";
  EXPECT_GT(l2.back().offload.moved.copy_busy_s, 0) << "the copy streams' events timed nothing";
}
