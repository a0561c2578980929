// conv2d throughput: batch 64, 64 -> 64 channels, 3x3, pad 1, at 32x32 (a ResNet stage-1 conv
// at CIFAR size). Counters report GFLOP/s (2 * N * Cout * OH * OW * Cin * KH * KW per pass).
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter=Conv
//
// Compare with PyTorch in the same session: save the script below (without the leading '// ')
// and run it with /usr/bin/python3 (Debian's PyTorch; packrat itself never needs Python).
//
//   import time, torch, torch.nn.functional as F
//   torch.set_num_threads(2); torch.manual_seed(0)
//   N, C, HW = 64, 64, 32
//   flops = 2.0 * N * C * HW * HW * C * 9
//   x = torch.rand(N, C, HW, HW) - 0.5; w = torch.rand(C, C, 3, 3) - 0.5; g = torch.rand(N, C, HW, HW) - 0.5
//   def bench(name, fn, passes):
//       for _ in range(2): fn()
//       ts = []
//       for _ in range(5):
//           t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
//       t = sorted(ts)[len(ts) // 2]
//       print(f"torch {name:28s} {t*1e3:8.1f} ms  {passes*flops/t/1e9:7.1f} GFLOP/s")
//   with torch.no_grad(): bench("forward", lambda: F.conv2d(x, w, padding=1), 1)
//   xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
//   def fb():
//       y = F.conv2d(xr, wr, padding=1); y.backward(g)
//   bench("forward+backward", fb, 3)
//   wd = w.clone().requires_grad_(); xd = x.clone().requires_grad_()
//   def bd():
//       y = F.conv2d(xd, w, padding=1); torch.autograd.grad(y, xd, g)
//   bench("forward+backward_data", bd, 2)
//   def bw():
//       y = F.conv2d(x, wd, padding=1); torch.autograd.grad(y, wd, g)
//   bench("forward+backward_weights", bw, 2)
//   print("torch", torch.__version__)
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <algorithm>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/cpu/conv.h"
#include "core/cpu/batchnorm.h"
#include "core/cpu/weight_cache.h"
#include "core/philox.h"

using namespace packrat;

namespace {
constexpr int64_t kN = 64, kC = 64, kHW = 32, kK = 3;

Tensor random(const Shape& s, uint64_t seed, MemTag tag = MemTag::Activation) {
  Tensor t = Tensor::empty(s, DType::f32, Layout::Plain, tag);
  PhiloxStream r(seed, 0);
  for (float& v : t.span<float>()) v = r.uniform() - 0.5f;
  return t;
}

ConvGeometry geometry() {
  return ConvGeometry{kN, kC, kHW, kHW, kC, kK, kK, kHW, kHW, 1, 1, 1, 1, 1, 1, 1, false};
}

void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

Layout layout_arg(const benchmark::State& state) { return state.range(0) ? Layout::nChw16c : Layout::Plain; }

// ops::conv2d forward (grad off), input plain (reordered inside the op) or blocked.
void BM_ConvForward(benchmark::State& state) {
  NoGradScope ng;
  Tensor x = random({kN, kC, kHW, kHW}, 1).to_layout(layout_arg(state));
  Tensor w = random({kC, kC, kK, kK}, 2, MemTag::Parameter);
  const ops::Conv2dOptions o{1, 1, 1, 1, 1, 1, 1};
  for (auto _ : state) benchmark::DoNotOptimize(ops::conv2d(x, w, Tensor(), o));
  set_gflops(state, geometry().flops());
  state.SetLabel(std::string(layout_name(x.layout())) + " input");
}

// Forward + backward through the tape (dx and dw), the weight changing every step as under an
// optimizer (so its reorders are paid each time, as in training). 3 passes of FLOPs.
void BM_ConvForwardBackward(benchmark::State& state) {
  Tensor x = random({kN, kC, kHW, kHW}, 1).to_layout(layout_arg(state));
  x.set_requires_grad(true);
  Tensor w = random({kC, kC, kK, kK}, 2, MemTag::Parameter);
  w.set_requires_grad(true);
  const ops::Conv2dOptions o{1, 1, 1, 1, 1, 1, 1};
  Tensor seed = random({kN, kC, kHW, kHW}, 3).to_layout(Layout::nChw16c);
  for (auto _ : state) {
    x.zero_grad();
    w.zero_grad();
    w.bump_version();
    Tensor y = ops::conv2d(x, w, Tensor(), o);
    backward(y, seed);
    benchmark::DoNotOptimize(w.grad());
  }
  set_gflops(state, 3 * geometry().flops());
  state.SetLabel(std::string(layout_name(x.layout())) + " input");
}

// The two backward kernels alone (blocked tensors, as in a network).
void BM_ConvBackwardData(benchmark::State& state) {
  Tensor gy = random({kN, kC, kHW, kHW}, 3).to_layout(Layout::nChw16c);
  Tensor w = random({kC, kC, kK, kK}, 2, MemTag::Parameter);
  for (auto _ : state) benchmark::DoNotOptimize(cpu::conv_backward_data(gy, w, geometry()));
  set_gflops(state, geometry().flops());
}

void BM_ConvBackwardWeights(benchmark::State& state) {
  Tensor x = random({kN, kC, kHW, kHW}, 1).to_layout(Layout::nChw16c);
  Tensor gy = random({kN, kC, kHW, kHW}, 3).to_layout(Layout::nChw16c);
  for (auto _ : state) {
    Tensor gw, gb;
    cpu::conv_backward_weights(x, gy, geometry(), gw, gb);
    benchmark::DoNotOptimize(gw);
  }
  set_gflops(state, geometry().flops());
}

// Reordering a 512x512x3x3 weight to the primitive's format: what the weight cache saves per
// eval-mode conv call (range(0) = 1: through the cache) on a tiny input where it dominates.
void BM_ConvWeightReorder512(benchmark::State& state) {
  NoGradScope ng;
  const bool cached = state.range(0) != 0;
  cpu::set_weight_cache_enabled(cached);
  Tensor x = random({1, 512, 4, 4}, 1).to_layout(Layout::nChw16c);
  Tensor w = random({512, 512, 3, 3}, 2, MemTag::Parameter);
  const ops::Conv2dOptions o{1, 1, 1, 1, 1, 1, 1};
  for (auto _ : state) benchmark::DoNotOptimize(ops::conv2d(x, w, Tensor(), o));
  cpu::set_weight_cache_enabled(true);
  state.SetLabel(cached ? "weight cache on (batch 1, 4x4)" : "weight cache off (batch 1, 4x4)");
}

// The batchnorm2d that follows this conv in ResNet (64x64x32x32; range(1) = 16: nChw16c as on
// AVX-512, 8: nChw8c as on AVX2, 0: plain), training forward + backward, with the loop kernel
// (range(0) = 0) or oneDNN's (1). GB/s counts the bytes the two passes must move at least:
// forward reads x twice and writes y, backward reads x, dy twice and writes dx (7 tensors of 16 MiB).
void BM_BatchNormForwardBackward(benchmark::State& state) {
  cpu::set_batchnorm_kernel(state.range(0) ? cpu::BatchNormKernel::Dnnl : cpu::BatchNormKernel::Loops);
  const Layout layout = state.range(1) == 16 ? Layout::nChw16c : state.range(1) == 8 ? Layout::nChw8c : Layout::Plain;
  Tensor x = random({kN, kC, kHW, kHW}, 1).to_layout(layout);
  x.set_requires_grad(true);
  Tensor w = random({kC}, 2, MemTag::Parameter), b = random({kC}, 3, MemTag::Parameter);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor rm = Tensor::zeros({kC}), rv = Tensor::full({kC}, 1.0f);
  Tensor seed = random({kN, kC, kHW, kHW}, 3).to_layout(layout);
  for (auto _ : state) {
    x.zero_grad();
    Tensor y = ops::batchnorm2d(x, w, b, rm, rv, true);
    backward(y, seed);
    benchmark::DoNotOptimize(x.grad());
  }
  cpu::set_batchnorm_kernel(cpu::BatchNormKernel::Loops);
  state.counters["GB/s"] = benchmark::Counter(7.0 * x.nbytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("{}, {}", state.range(0) ? "oneDNN kernel" : "loop kernel", layout_name(layout)));
}

// The same batchnorm on a bf16 x, as a bf16 step runs it (autocast: x read as it lies, y written in
// bf16, the gradients f32), nChw16c (range(0) = 16), NHWC (1) or plain (0): the training forward
// (range(1) = 0), or the backward after it (1, timed alone). GB/s counts the bytes the passes must
// move: forward reads x twice and writes y (3 tensors of 8 MiB); backward reads x and dy twice and
// writes dx (2 of 8 MiB, 3 of 16 MiB).
void BM_BatchNormBf16(benchmark::State& state) {
  const Layout layout = state.range(0) == 16 ? Layout::nChw16c : state.range(0) == 1 ? Layout::NHWC : Layout::Plain;
  const bool backward_pass = state.range(1) != 0;
  const Tensor x = random({kN, kC, kHW, kHW}, 1).to_layout(layout).to(DType::bf16);
  const Tensor gy = random({kN, kC, kHW, kHW}, 4).to_layout(layout);  // f32
  const Tensor w = random({kC}, 2, MemTag::Parameter), b = random({kC}, 3, MemTag::Parameter);
  Tensor y, mean, var, dx, dw, db;
  cpu::batchnorm_forward_training(x, w, b, 1e-5f, y, mean, var);
  for (auto _ : state) {
    if (backward_pass) cpu::batchnorm_backward(x, gy, w, true, mean, var, 1e-5f, false, dx, dw, db);
    else cpu::batchnorm_forward_training(x, w, b, 1e-5f, y, mean, var);
    benchmark::DoNotOptimize(backward_pass ? dx : y);
  }
  const double bytes = backward_pass ? 2.0 * x.nbytes() + 3.0 * gy.nbytes() : 3.0 * x.nbytes();
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("{} {}", backward_pass ? "backward" : "forward", layout_name(layout)));
}

// ResNet-18's 3x3 stride-1 convolutions at CIFAR size, batch 64 (range(0) channels at 32x32 for 64,
// 16x16 for 128, 8x8 for 256, 4x4 for 512), each pass alone (range(2): 0 forward, 1 data gradient,
// 2 weight gradient) in f32 (range(1) = 0: conv_algorithm auto, Winograd where oneDNN has it) or
// bf16 (1: the kernels a bf16 step runs, the weight gradient in the dtype the backend names, its
// input converted from the saved bf16 inside the timing where that is f32, as the op's load does).
// Where bf16 gains and where it does not against f32's Winograd (docs/precision.md):
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter=ResNet18Conv3x3
void BM_ResNet18Conv3x3(benchmark::State& state) {
  const int64_t c = state.range(0), hw = 32 * 64 / c;
  const bool bf16 = state.range(1) != 0;
  const int pass = static_cast<int>(state.range(2));
  ConvGeometry g{kN, c, hw, hw, c, kK, kK, hw, hw, 1, 1, 1, 1, 1, 1, 1, false};
  g.dtype = bf16 ? DType::bf16 : DType::f32;
  if (bf16 && !backend(Device::cpu()).conv_computes_in(DType::bf16)) {
    state.SkipWithError("this CPU has no bf16 convolutions");
    return;
  }
  const Layout blocked = cpu::native_blocked_layout();
  const Tensor x = random({kN, c, hw, hw}, 1).to_layout(blocked).to(g.dtype);   // (N, C, H, W) as saved
  const Tensor gy32 = random({kN, c, hw, hw}, 3).to_layout(blocked);            // (N, C, H, W) f32, as the tape gives it
  const Tensor w = random({c, c, kK, kK}, 2, MemTag::Parameter);
  const Tensor gy = gy32.to(g.dtype);
  std::string kernel;
  if (pass == 0) {
    for (auto _ : state) benchmark::DoNotOptimize(cpu::conv_forward(x, w, Tensor(), g, false));
    kernel = cpu::conv_layouts(g).implementation;
  } else if (pass == 1) {
    for (auto _ : state) benchmark::DoNotOptimize(cpu::conv_backward_data(gy, w, g));
    kernel = cpu::conv_backward_implementations(g).first;
  } else {
    ConvGeometry gw_geometry = g;
    gw_geometry.dtype = cpu::weight_gradient_dtype(g);
    const bool from_f32 = gw_geometry.dtype != g.dtype;
    for (auto _ : state) {
      Tensor gw, gb;
      cpu::conv_backward_weights(from_f32 ? x.to(DType::f32) : x, from_f32 ? gy32 : gy, gw_geometry, gw, gb);
      benchmark::DoNotOptimize(gw);
    }
    kernel = cpu::conv_backward_implementations(gw_geometry).second;
  }
  set_gflops(state, g.flops());
  state.SetLabel(fmt::format("{} {}", bf16 ? "bf16" : "f32", kernel));
}

// EfficientNet-B0's depthwise weight gradients at CIFAR size, batch 32 (range(0) the geometry, as
// kDepthwise lists them; range(1): 0 f32 blocked, 1 bf16 as a bf16 step runs it, NHWC on an AMX
// CPU), the kernel the backend picks named in the label: oneDNN's jit_dw or packrat's own loop
// (core/cpu/depthwise_conv.h). GB/s counts the two operands read once.
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter=DepthwiseWeightGradient
struct DepthwiseCase {
  int64_t c, hw, k, stride;
};
constexpr DepthwiseCase kDepthwise[] = {{32, 32, 3, 1},  {96, 32, 3, 2},  {144, 16, 3, 1}, {144, 16, 5, 2},
                                        {240, 8, 5, 1},  {240, 8, 3, 2},  {480, 4, 3, 1},  {480, 4, 5, 1},
                                        {672, 4, 5, 1},  {672, 4, 5, 2},  {1152, 2, 5, 1}, {1152, 2, 3, 1}};
void BM_DepthwiseWeightGradient(benchmark::State& state) {
  const DepthwiseCase c = kDepthwise[state.range(0)];
  const bool bf16 = state.range(1) != 0;
  constexpr int64_t n = 32;
  const int64_t o = (c.hw + 2 * (c.k / 2) - c.k) / c.stride + 1;
  ConvGeometry g{n, c.c, c.hw, c.hw, c.c, c.k, c.k, o, o, c.stride, c.stride, c.k / 2, c.k / 2, 1, 1, c.c, false};
  g.dtype = bf16 ? DType::bf16 : DType::f32;
  if (bf16 && !backend(Device::cpu()).conv_computes_in(DType::bf16)) {
    state.SkipWithError("this CPU has no bf16 convolutions");
    return;
  }
  const Layout layout = cpu::conv_layouts(g).src;
  const Tensor x = random({n, c.c, c.hw, c.hw}, 1).to_layout(layout).to(g.dtype);  // (N, C, H, W) as saved
  const Tensor gy = cpu::conv_grad_output(random({n, c.c, o, o}, 3).to_layout(cpu::conv_layouts(g).dst), g);
  ConvGeometry gw_geometry = g;
  gw_geometry.dtype = cpu::weight_gradient_dtype(g);
  const bool from_f32 = gw_geometry.dtype != g.dtype;
  for (auto _ : state) {
    Tensor gw, gb;
    cpu::conv_backward_weights(from_f32 ? x.to(DType::f32) : x, from_f32 ? gy.to(DType::f32) : gy, gw_geometry, gw, gb);
    benchmark::DoNotOptimize(gw);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(x.nbytes() + gy.nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("{} {} {}", g.key(), layout_name(layout),
                             cpu::conv_backward_implementations(gw_geometry).second));
}
}  // namespace

BENCHMARK(BM_BatchNormForwardBackward)->ArgsProduct({{0, 1}, {16, 8, 0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchNormBf16)->ArgsProduct({{16, 1, 0}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ConvForward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ConvForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ConvBackwardData)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ConvBackwardWeights)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ResNet18Conv3x3)
    ->ArgsProduct({{64, 128, 256, 512}, {0, 1}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DepthwiseWeightGradient)
    ->ArgsProduct({benchmark::CreateDenseRange(0, std::size(kDepthwise) - 1, 1), {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ConvWeightReorder512)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
