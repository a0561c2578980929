// Per-group quantize+pack and unpack+dequantize throughput against a plain copy of the same
// f32 tensor (64, 64, 32, 32) in the same run. Counters: GB/s of f32 data processed, and the
// ratio to the copy's GB/s measured in the same process (target: >= 0.5). And bf16 read and
// written as it lies against the same through f32 copies (BM_GroupQuant_Bf16).
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='GroupQuant'
#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <cstring>

#include "core/cpu/layout.h"
#include "bench/codec_bench_input.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/group/group_quant.h"

namespace packrat {
namespace {

using namespace codec_bench;  // kN, kC, kH, kW, kNumel, make_input

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads): robust when other jobs share the cores.
double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall and process-CPU seconds of one call, added to the running sums.
template <typename Fn>
void timed(double& wall, double& cpu, Fn&& fn) {
  const double c0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  benchmark::ClobberMemory();
  wall += seconds_since(t0);
  cpu += process_cpu_seconds() - c0;
}

// The machine is shared: each iteration times one copy and one kernel call back to back, and
// the ratio is taken over the sums, so that load changes affect both sides alike.
// ratio_to_copy: wall-clock bandwidth relative to memcpy (the target: >= 0.5);
// cpu_ratio_to_copy: the same with process CPU time (bandwidth per busy core), which stays
// meaningful when the machine is loaded by other jobs.
void report(benchmark::State& state, double kernel_s, double copy_s, double kernel_cpu, double copy_cpu) {
  const double bytes = static_cast<double>(kNumel) * 4 * static_cast<double>(state.iterations());
  state.counters["GBps"] = bytes / kernel_s / 1e9;
  state.counters["copy_GBps"] = bytes / copy_s / 1e9;
  state.counters["ratio_to_copy"] = copy_s / kernel_s;
  state.counters["cpu_ratio_to_copy"] = copy_cpu / kernel_cpu;
}

// An f32 tensor of `shape`, its values uniform in [-1, 3) (Philox stream 7, the same every run).
Tensor uniform_values(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  PhiloxStream s(7, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = s.uniform() * 4.0f - 1.0f;
  return t;
}

void BM_GroupQuant_Copy(benchmark::State& state) {
  Tensor x = make_input(), y = Tensor::empty_like(x);
  for (auto _ : state) {
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(x.nbytes()) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

void BM_GroupQuant_Quantize(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const bool stochastic = state.range(1) != 0;
  Tensor x = make_input(), y = Tensor::empty_like(x);
  GroupQuantConfig c;
  c.bits = bits;
  const GroupGeometry g = group_geometry(kNumel, kN, c);
  Tensor codes = Tensor::empty({g.code_bytes()}, DType::u8), meta = Tensor::empty({g.meta_bytes()}, DType::u8);
  double kernel_s = 0, copy_s = 0, kernel_cpu = 0, copy_cpu = 0;
  for (auto _ : state) {
    timed(copy_s, copy_cpu, [&] { std::memcpy(y.raw(), x.raw(), x.nbytes()); });
    timed(kernel_s, kernel_cpu, [&] {
      quantize_groups(x.data<float>(), g, stochastic ? Rounding::Stochastic : Rounding::Nearest, {1, 42},
                      codes.data<uint8_t>(), meta.data<uint8_t>());
    });
  }
  report(state, kernel_s, copy_s, kernel_cpu, copy_cpu);
}

void BM_GroupQuant_Dequantize(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  Tensor x = make_input(), y = Tensor::empty_like(x);
  GroupQuantConfig c;
  c.bits = bits;
  const GroupGeometry g = group_geometry(kNumel, kN, c);
  Tensor codes = Tensor::empty({g.code_bytes()}, DType::u8), meta = Tensor::empty({g.meta_bytes()}, DType::u8);
  quantize_groups(x.data<float>(), g, Rounding::Stochastic, {1, 42}, codes.data<uint8_t>(), meta.data<uint8_t>());
  Tensor z = Tensor::empty_like(x);
  double kernel_s = 0, copy_s = 0, kernel_cpu = 0, copy_cpu = 0;
  for (auto _ : state) {
    timed(copy_s, copy_cpu, [&] { std::memcpy(z.raw(), x.raw(), x.nbytes()); });
    timed(kernel_s, kernel_cpu, [&] { dequantize_groups(codes.data<uint8_t>(), meta.data<uint8_t>(), g, y.data<float>()); });
  }
  report(state, kernel_s, copy_s, kernel_cpu, copy_cpu);
}

// Groups of 64 on EfficientNet's 14 x 14 planes, (128, 64, 14, 14): per sample (aligned to the
// noise's 128-element blocks) and per plane (4 groups of 49 a plane), of the plain tensor and of
// the same tensor in the CPU's blocked layout (nChw16c with AVX-512, nChw8c without; read in
// plain order through a transpose of each channel block's tile). side 4: ActNN's per-sample
// groups of 256 on the 4 x 4 planes of ResNet-18's last stage, (512, 512, 4, 4) (per plane: one
// group a plane), where a group spans 16 channels and so one or two channel blocks (the tiles'
// groups of whole tiles, whole_plane_tiles.h); side 2: the same on 2 x 2 planes (EfficientNet-B0's
// last stages on CIFAR), 64 channels a group. Stochastic, 2 bits, quantize then dequantize.
void BM_GroupQuant_Grouping(benchmark::State& state) {
  const bool per_plane = state.range(0) != 0, blocked = state.range(1) != 0;
  const int64_t side = state.range(2);
  const Tensor plain = side <= 4 ? uniform_values({512, 512, side, side}) : uniform_values({128, 64, side, side});  // (N, C, H, W)
  const Tensor x = blocked ? plain.to_layout(cpu::native_blocked_layout()) : plain, y = Tensor::empty_like(x);
  GroupQuantConfig c;
  c.bits = 2;
  c.group_size = side <= 4 ? 256 : 64;
  c.grouping = per_plane ? Grouping::PerPlane : Grouping::PerSample;
  const GroupGeometry g = group_geometry_of(x, c);
  const CodecWalk walk = codec_order(x, g).walk;
  Tensor codes = Tensor::empty({g.code_bytes()}, DType::u8), meta = Tensor::empty({g.meta_bytes()}, DType::u8);
  for (auto _ : state) {
    quantize_groups(x, g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
    dequantize_groups(codes, meta, g, y, walk);
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(x.nbytes()) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// A bf16 tensor (autocast's saved activations), EfficientNet-like (128, 64, side, side) in the
// CPU's blocked layout or plain, GACT's per-plane groups of 32 at 2 bits, stochastic: quantized and
// dequantized back into bf16 by the kernels reading and writing bf16 as it lies ("direct"), against
// the same through f32 copies (convert, quantize, dequantize, convert: the path before), the two
// timed back to back in every iteration. speedup: the f32 copies' time over the direct one's.
// side 14: the per-plane tiles (plane_tiles.h); 32: the same on planes of whole noise blocks, whose
// noise is made in the tiles' order (TileNoise::fill_by_lanes); 4: groups of whole small planes
// through the tiles' transposes (PlainRuns); blocked 0: a plain buffer's groups widened through a window of 16384 f32
// values (kMaxStagedGroup), which stays in L2.
void BM_GroupQuant_Bf16(benchmark::State& state) {
  const int64_t side = state.range(0);
  const bool blocked = state.range(1) != 0;
  const Tensor plain = uniform_values({128, 64, side, side});  // (N, C, H, W)
  const Tensor x16 = (blocked ? plain.to_layout(cpu::native_blocked_layout()) : plain).to(DType::bf16);
  const Tensor y16 = Tensor::empty_like(x16);
  GroupQuantConfig c;
  c.bits = 2;
  c.group_size = 32;
  c.grouping = Grouping::PerPlane;
  const GroupGeometry g = group_geometry_of(x16, c);
  const CodecWalk walk = codec_order(x16, g).walk;
  Tensor codes = Tensor::empty({g.code_bytes()}, DType::u8), meta = Tensor::empty({g.meta_bytes()}, DType::u8);
  double direct_s = 0, via_s = 0, direct_cpu = 0, via_cpu = 0;
  for (auto _ : state) {
    timed(via_s, via_cpu, [&] {
      quantize_groups(x16.to(DType::f32), g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
      Tensor yf = Tensor::empty(x16.shape(), DType::f32, x16.layout());
      dequantize_groups(codes, meta, g, yf, walk);
      benchmark::DoNotOptimize(yf.to(DType::bf16).raw());
    });
    timed(direct_s, direct_cpu, [&] {
      quantize_groups(x16, g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
      dequantize_groups(codes, meta, g, y16, walk);
    });
  }
  state.counters["direct_ms"] = 1e3 * direct_s / static_cast<double>(state.iterations());
  state.counters["via_f32_ms"] = 1e3 * via_s / static_cast<double>(state.iterations());
  state.counters["speedup"] = via_s / direct_s;
  state.counters["cpu_speedup"] = via_cpu / direct_cpu;
}

// The 2-bit EfficientNet's codec, one half at a time: per-plane groups of 32 of an f32 tensor
// (128, 64, side, side) in the CPU's blocked layout, quantized (stochastic, `bits`) each iteration
// (PlaneQuantize: the forward's half), or quantized once and dequantized each iteration
// (PlaneDequantize: the backward's). 14 and 28: the per-plane tiles (plane_tiles.h); 4: groups of
// two whole planes (whole_plane_tiles.h); 2 at 3 bits: groups of eight whole planes whose lanes'
// codes are 12 bits (store_lane_bits). ns_per_value: one thread's time a value.
void plane_codec_half(benchmark::State& state, bool quantize) {
  const int bits = static_cast<int>(state.range(0));
  const int64_t side = state.range(1);
  const Tensor plain = uniform_values({128, 64, side, side});  // (N, C, H, W)
  const Tensor x = plain.to_layout(cpu::native_blocked_layout()), y = Tensor::empty_like(x);
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = 32;
  c.grouping = Grouping::PerPlane;
  const GroupGeometry g = group_geometry_of(x, c);
  const CodecWalk walk = codec_order(x, g).walk;
  Tensor codes = Tensor::empty({g.code_bytes()}, DType::u8), meta = Tensor::empty({g.meta_bytes()}, DType::u8);
  quantize_groups(x, g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
  double wall = 0, cpu = 0;
  for (auto _ : state)
    timed(wall, cpu, [&] {
      if (quantize)
        quantize_groups(x, g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
      else
        dequantize_groups(codes, meta, g, y, walk);
    });
  const double values = static_cast<double>(x.numel()) * static_cast<double>(state.iterations());
  state.counters["ms"] = 1e3 * wall / static_cast<double>(state.iterations());
  state.counters["ns_per_value"] = 1e9 * cpu / values;
}
void BM_GroupQuant_PlaneQuantize(benchmark::State& state) { plane_codec_half(state, true); }
void BM_GroupQuant_PlaneDequantize(benchmark::State& state) { plane_codec_half(state, false); }
void plane_codec_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bits", "side"})->Args({1, 14})->Args({2, 14})->Args({2, 28})->Args({3, 14})->Args({2, 4})->Args({3, 2});
}

BENCHMARK(BM_GroupQuant_Copy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GroupQuant_Quantize)
    ->ArgNames({"bits", "stochastic"})
    ->Args({2, 1})
    ->Args({4, 1})
    ->Args({2, 0})
    ->Args({4, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GroupQuant_Dequantize)->ArgName("bits")->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GroupQuant_Grouping)
    ->ArgNames({"per_plane", "blocked", "side"})
    ->Args({0, 0, 14})
    ->Args({0, 1, 14})
    ->Args({1, 0, 14})
    ->Args({1, 1, 14})
    ->Args({0, 0, 4})
    ->Args({0, 1, 4})
    ->Args({0, 0, 2})
    ->Args({0, 1, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GroupQuant_PlaneQuantize)->Apply(plane_codec_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GroupQuant_PlaneDequantize)->Apply(plane_codec_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GroupQuant_Bf16)
    ->ArgNames({"side", "blocked"})
    ->Args({14, 1})
    ->Args({32, 1})
    ->Args({4, 1})
    ->Args({14, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace packrat
