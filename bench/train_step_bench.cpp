// One full training step (forward, backward, SGD update) of ResNet-18 with the CIFAR stem and
// GELU activations on random 3x32x32 images, under several saved-tensor schemes. Reports
// images/s (img_per_s: wall clock; cpu_img_per_s: process CPU time) and the bytes the store held
// after the forward (from the allocator) as counters. bench/compare_torch.py runs the PyTorch step
// beside it and prints the ratio. On a GPU (when one is visible): TrainStep/resnet18_cifar_gelu_cuda/{128,512}
// in FP32, against PyTorch with bench/compare_torch.py --device cuda, and its _fewbit3 / _actnn2
// twins against it (issue 11's throughput ratios).
#include <benchmark/benchmark.h>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"
#include "core/device_runtime.h"
#include "bench/step_clock.h"
#include "core/philox.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "quant/policy/rule_policy.h"

namespace packrat {
namespace {

StorePolicySpec scheme_spec(const std::string& name) {
  StorePolicySpec s;
  if (name == "fewbit3") {  // 3-bit few-bit GELU derivatives, everything else FP32
    s.rules.push_back({{"gelu"}, {}, {"fewbit", {{"bits", "3"}}, "bench"}});
  } else if (name == "actnn2") {  // every saved tensor at 2 bits (masks and indices exact)
    s.default_scheme = {"actnn", {{"bits", "2"}}, "bench"};
  } else if (name == "actnn2_fewbit2") {  // 2 bits per group, SiLU / sigmoid as 2-bit few-bit indices
    s.default_scheme = {"actnn", {{"bits", "2"}}, "bench"};
    s.rules.push_back({{"silu", "sigmoid"}, {}, {"fewbit", {{"bits", "2"}}, "bench"}});
  }
  return s;
}

// Names stay exactly "TrainStep/<model>/<batch>": run with --benchmark_min_time=5 for steady figures.
// `spec` is the model, on 3x32x32 inputs; on `device` (the batch waits there, as in PyTorch's
// benchmark). A GPU is synchronised after every step, so the clock times finished steps.
// autocast: bf16 runs the forward under AutocastScope(bf16) (`precision: bf16`).
void TrainStepOf(benchmark::State& state, const ModelSpec& spec, const std::string& scheme,
                 Device device = Device::cpu(), DType autocast = DType::f32) {
  const int64_t batch = state.range(0);
  make_current(device);
  DeviceScope on(device);
  auto model = make_model(spec);
  SGD opt(model->named_parameters(), SgdOptions{0.01, 0.9});
  PhiloxStream rng(1, 1);
  std::vector<float> pixels(static_cast<size_t>(batch * 3 * 32 * 32));
  for (auto& p : pixels) p = rng.normal();
  std::vector<int64_t> classes(static_cast<size_t>(batch));
  for (auto& c : classes) c = static_cast<int64_t>(rng.below(10));
  Tensor x = Tensor::from_vector({batch, 3, 32, 32}, pixels);
  Tensor y = Tensor::empty({batch}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());
  std::copy(classes.begin(), classes.end(), y.data<int64_t>());
  y = y.to(device);

  RulePolicy policy(scheme_spec(scheme));
  PolicyScope scope(policy);
  int64_t step = 0, saved_bytes = 0, saved_fp32_bytes = 0;
  Allocator& memory = Allocator::of(device);
  memory.reset_peak();
  const bench::StepClock clock;
  for (auto _ : state) {
    policy.begin_step(step++);
    opt.zero_grad();
    Tensor loss;
    {
      const AutocastScope precision(autocast);
      loss = ops::cross_entropy((*model)(x), y);
    }
    saved_bytes = saved_fp32_bytes = 0;
    for (const auto& r : policy.describe()) {
      saved_bytes += r.bytes;
      saved_fp32_bytes += r.fp32_bytes;
    }
    backward(loss);
    opt.step();
    synchronize(device);
  }
  const double wall = clock.wall_seconds(), cpu = clock.cpu_seconds();
  state.SetItemsProcessed(state.iterations() * batch);
  // items_per_second comes from the main thread's CPU time; img_per_s is wall-clock,
  // cpu_img_per_s the whole process's CPU time.
  state.counters["img_per_s"] = static_cast<double>(state.iterations() * batch) / wall;
  state.counters["cpu_img_per_s"] = static_cast<double>(state.iterations() * batch) / cpu;
  state.counters["saved_MB"] = static_cast<double>(saved_bytes) / 1e6;
  state.counters["peak_bytes"] = static_cast<double>(memory.total_peak());  // the device allocator's, over the steps
  state.counters["saved_vs_fp32"] = static_cast<double>(saved_bytes) / static_cast<double>(saved_fp32_bytes);
}

void TrainStep(benchmark::State& state, const std::string& scheme) {
  TrainStepOf(state, {"resnet18", "cifar", "gelu", 3, 10, 0}, scheme);
}
void TrainStepBf16(benchmark::State& state, const std::string& scheme) {
  TrainStepOf(state, {"resnet18", "cifar", "gelu", 3, 10, 0}, scheme, Device::cpu(), DType::bf16);
}

// torchvision's EfficientNet-B0 with the stride-1 cifar stem (bench/torch_train_step.py --model
// efficientnet_b0_cifar is its PyTorch twin).
void TrainStepEfficientNet(benchmark::State& state, const std::string& scheme) {
  TrainStepOf(state, {"efficientnet_b0", "cifar", "", 3, 10, 0}, scheme);
}
void TrainStepEfficientNetBf16(benchmark::State& state, const std::string& scheme) {
  TrainStepOf(state, {"efficientnet_b0", "cifar", "", 3, 10, 0}, scheme, Device::cpu(), DType::bf16);
}

BENCHMARK_CAPTURE(TrainStep, resnet18_cifar_gelu, std::string("fp32"))
    ->Name("TrainStep/resnet18_cifar_gelu")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStep, resnet18_cifar_gelu_fewbit3, std::string("fewbit3"))
    ->Name("TrainStep/resnet18_cifar_gelu_fewbit3")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStep, resnet18_cifar_gelu_actnn2, std::string("actnn2"))
    ->Name("TrainStep/resnet18_cifar_gelu_actnn2")->Arg(64)->Unit(benchmark::kMillisecond);
// The CIFAR ViT (vit_tiny_cifar: patch 4, 6 x 192, 3 heads); PyTorch twin:
//   bench/compare_torch.py --name TrainStep/vit_tiny_cifar/64
BENCHMARK_CAPTURE(TrainStepOf, vit_tiny_cifar, ModelSpec{"vit_tiny_cifar", "", "", 3, 10, 0}, std::string("fp32"))
    ->Name("TrainStep/vit_tiny_cifar")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStepOf, vit_tiny_cifar_actnn2, ModelSpec{"vit_tiny_cifar", "", "", 3, 10, 0}, std::string("actnn2"))
    ->Name("TrainStep/vit_tiny_cifar_actnn2")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStepEfficientNet, efficientnet_b0_cifar, std::string("fp32"))
    ->Name("TrainStep/efficientnet_b0_cifar")->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStepEfficientNet, efficientnet_b0_cifar_actnn2_fewbit2, std::string("actnn2_fewbit2"))
    ->Name("TrainStep/efficientnet_b0_cifar_actnn2_fewbit2")->Arg(32)->Unit(benchmark::kMillisecond);
// precision: bf16 (autocast); PyTorch twins: bench/torch_train_step.py --autocast bf16.
BENCHMARK_CAPTURE(TrainStepBf16, resnet18_cifar_gelu_bf16, std::string("fp32"))
    ->Name("TrainStep/resnet18_cifar_gelu_bf16")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStepBf16, resnet18_cifar_gelu_bf16_actnn2, std::string("actnn2"))
    ->Name("TrainStep/resnet18_cifar_gelu_bf16_actnn2")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainStepEfficientNetBf16, efficientnet_b0_cifar_bf16, std::string("fp32"))
    ->Name("TrainStep/efficientnet_b0_cifar_bf16")->Arg(32)->Unit(benchmark::kMillisecond);

// Registered only when a GPU is visible (a benchmark that cannot run is not listed).
[[maybe_unused]] const bool kCudaRegistered = [] {
  for (Backend* b : available_backends()) {
    if (b->device().is_cpu()) continue;
    // FP32, then the two compressed schemes of issue 11 (their codecs run on the GPU).
    for (const std::string scheme : {"fp32", "fewbit3", "actnn2"}) {
      const std::string name =
          "TrainStep/resnet18_cifar_gelu_cuda" + (scheme == "fp32" ? std::string() : "_" + scheme);
      for (int64_t batch : {128, 512})
        benchmark::RegisterBenchmark(name.c_str(), [device = b->device(), scheme](benchmark::State& s) {
          TrainStepOf(s, {"resnet18", "cifar", "gelu", 3, 10, 0}, scheme, device);
        })->Arg(batch)->Unit(benchmark::kMillisecond);
    }
    return true;  // the first GPU
  }
  return false;
}();

}  // namespace
}  // namespace packrat
