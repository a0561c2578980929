// The compression codecs' CUDA kernels against the device's copy bandwidth, measured side by side
// in one run (issue 11's "quantize + pack at least 70% of copy bandwidth"). On a 64 Mi-element
// f32 tensor (256 MiB, uniform in [-1, 3)), every iteration times the kernel, then a
// device-to-device copy of the same tensor (the backend's copy: cudaMemcpyAsync), each followed
// by synchronize(), so both clocks time finished work. Counters:
//   GBps       bytes the kernel reads + writes (input, codes, metadata, flags, outputs) / its time
//   copy_GBps  2 x 256 MiB (read + write) / the copy's time
//   vs_copy    GBps / copy_GBps
// Kernels: per-group quantize + pack and unpack + dequantize (1, 2, 4, 8 bits, groups of 256
// per sample, bf16 metadata, stochastic), few-bit encode (GELU forward + 3-bit interval codes)
// and apply (unpack, look up, times the gradient), the mixed quantizer (2/4 bits at 0.5 per
// bucket of 512, affine) and the deterministic 4-bit one, each way, and per-plane and per-sample
// groups, and the mixed buckets, of an NHWC tensor staged in plain order (quantize, dequantize, a
// GELU's backward from the codes).
// Registered only when a GPU is visible at startup; otherwise one line on stderr says so (the
// CPU build compiles this file and registers nothing).
//
//   build-cuda/bin/packrat_bench --benchmark_filter='CodecCuda'
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "core/backend.h"
#include "core/device_runtime.h"
#include "quant/bits/bitpack.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/fewbit/fewbit_table.h"
#include "quant/group/group_quant.h"
#include "quant/mixed/mixed_quant.h"

namespace packrat {
namespace {

constexpr int64_t kN = 256, kC = 64, kH = 64, kW = 64;  // 64 Mi elements
constexpr int64_t kNumel = kN * kC * kH * kW;
constexpr double kTensorBytes = 4.0 * static_cast<double>(kNumel);

Tensor device_tensor(const Shape& s, DType dtype, Device d) { return Tensor::empty(s, dtype, Layout::Plain, MemTag::Workspace, d); }

// (N, C, H, W) f32 on d, uniform in [lo, hi).
Tensor uniform_input(Device d, uint64_t stream, float lo, float hi) {
  Tensor t = device_tensor({kN, kC, kH, kW}, DType::f32, d);
  backend(d).fill_uniform(t, lo, hi, 7, stream, 0);
  return t;
}

double timed(Device d, const std::function<void()>& fn) {
  synchronize(d);
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  synchronize(d);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times `kernel` and the copy of x, iteration by iteration, and reports the counters.
void run_against_copy(benchmark::State& state, Device d, const Tensor& x, double kernel_bytes,
                      const std::function<void()>& kernel) {
  Tensor copy = Tensor::empty(x.shape(), DType::f32, x.layout(), MemTag::Workspace, d);  // x's shape and layout
  Backend& be = backend(d);
  kernel();  // warm-up: allocator cache, first launches
  be.copy(x, copy);
  double kernel_s = 0, copy_s = 0;
  for (auto _ : state) {
    const double k = timed(d, kernel), c = timed(d, [&] { be.copy(x, copy); });
    kernel_s += k;
    copy_s += c;
    state.SetIterationTime(k);
  }
  const double it = static_cast<double>(state.iterations());
  const double gbps = kernel_bytes * it / kernel_s / 1e9, copy_gbps = 2.0 * kTensorBytes * it / copy_s / 1e9;
  state.counters["GBps"] = gbps;
  state.counters["copy_GBps"] = copy_gbps;
  state.counters["vs_copy"] = gbps / copy_gbps;
}

GroupGeometry group_geometry_at(int bits) {
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = 256;
  return group_geometry(kNumel, kN, c);
}

// Argument: bits.
void GroupQuantize(benchmark::State& state, Device d) {
  make_current(d);
  const GroupGeometry g = group_geometry_at(static_cast<int>(state.range(0)));
  const Tensor x = uniform_input(d, 1, -1.0f, 3.0f);
  const Tensor codes = device_tensor({g.code_bytes()}, DType::u8, d), meta = device_tensor({g.meta_bytes()}, DType::u8, d);
  uint64_t step = 0;
  run_against_copy(state, d, x, kTensorBytes + static_cast<double>(g.total_bytes()),
                   [&] { quantize_groups(x, g, Rounding::Stochastic, {1, quant_stream(step++, 0)}, codes, meta); });
}

void GroupDequantize(benchmark::State& state, Device d) {
  make_current(d);
  const GroupGeometry g = group_geometry_at(static_cast<int>(state.range(0)));
  const Tensor x = uniform_input(d, 1, -1.0f, 3.0f);
  const Tensor codes = device_tensor({g.code_bytes()}, DType::u8, d), meta = device_tensor({g.meta_bytes()}, DType::u8, d);
  quantize_groups(x, g, Rounding::Stochastic, {1, 42}, codes, meta);
  const Tensor out = device_tensor(x.shape(), DType::f32, d);
  run_against_copy(state, d, x, kTensorBytes + static_cast<double>(g.total_bytes()),
                   [&] { dequantize_groups(codes, meta, g, out); });
}

// Groups of 256 of an NHWC tensor (a GPU convolution's layout) of 64 Mi elements, 2 bits, in plain
// order: the quantize stages each block's run through shared memory (quant/group/nhwc_tile.h), the
// decode writes NHWC from the block's codes (quant/group/nhwc_decode.h). Per
// plane: (1024, 64, 32, 32), one channel's quarter plane a group; per sample: (4096, 256, 8, 8), four
// channels' planes a group. Argument: 0 quantize, 1 dequantize, 2 a GELU's backward.
void GroupNhwc(benchmark::State& state, Device d, const Shape& shape, Grouping grouping) {
  make_current(d);
  Tensor plain = device_tensor(shape, DType::f32, d);  // (N, C, H, W)
  backend(d).fill_uniform(plain, -1.0f, 3.0f, 7, 1, 0);
  const Tensor x = backend(d).to_layout(plain, Layout::NHWC);
  GroupQuantConfig c;
  c.bits = 2;
  c.grouping = grouping;
  const GroupGeometry g = group_geometry_of(x, c);
  const CodecWalk walk = codec_order(x, g).walk;
  if (!walk.nhwc) {
    state.SkipWithError("these groups are not staged (codec_order)");
    return;
  }
  const Tensor codes = device_tensor({g.code_bytes()}, DType::u8, d), meta = device_tensor({g.meta_bytes()}, DType::u8, d);
  quantize_groups(x, g, Rounding::Stochastic, {1, 42}, codes, meta, nullptr, walk);
  const Tensor out = Tensor::empty(x.shape(), DType::f32, Layout::NHWC, MemTag::Workspace, d);
  uint64_t step = 0;
  switch (state.range(0)) {
    case 0:
      return run_against_copy(state, d, x, kTensorBytes + static_cast<double>(g.total_bytes()), [&] {
        quantize_groups(x, g, Rounding::Stochastic, {1, quant_stream(step++, 0)}, codes, meta, nullptr, walk);
      });
    case 1:
      return run_against_copy(state, d, x, kTensorBytes + static_cast<double>(g.total_bytes()),
                              [&] { dequantize_groups(codes, meta, g, out, walk); });
    default:
      return run_against_copy(state, d, x, 2.0 * kTensorBytes + static_cast<double>(g.total_bytes()), [&] {
        dequantize_groups_apply(codes, meta, g, ActivationId::gelu, false, x, out, walk);
      });
  }
}

void GroupNhwcPerPlane(benchmark::State& state, Device d) {
  GroupNhwc(state, d, Shape{1024, kC, 32, 32}, Grouping::PerPlane);
}
void GroupNhwcPerSample(benchmark::State& state, Device d) {
  GroupNhwc(state, d, Shape{4096, 4 * kC, 8, 8}, Grouping::PerSample);
}

FewbitCoder gelu3() {
  FewbitCoder c;
  c.kind = FewbitKind::Table;
  c.bits = 3;
  c.lut = fewbit_table("gelu", 3).lut();
  return c;
}

// y = gelu(x) and x's 3-bit codes, in one pass.
void FewbitEncode(benchmark::State& state, Device d) {
  make_current(d);
  const FewbitCoder c = gelu3();
  const Tensor x = uniform_input(d, 1, -4.0f, 4.0f);
  const Tensor y = device_tensor(x.shape(), DType::f32, d), packed = device_tensor({packed_bytes(kNumel, 3)}, DType::u8, d);
  const Pointwise& gelu = pointwise_by_name("gelu");
  run_against_copy(state, d, x, 2.0 * kTensorBytes + static_cast<double>(packed_bytes(kNumel, 3)),
                   [&] { fewbit_encode(c, &gelu, x, y, packed); });
}

// grad * level[code], in one pass.
void FewbitApply(benchmark::State& state, Device d) {
  make_current(d);
  const FewbitCoder c = gelu3();
  const Tensor x = uniform_input(d, 1, -4.0f, 4.0f), grad = uniform_input(d, 2, -1.0f, 1.0f);
  const Tensor packed = device_tensor({packed_bytes(kNumel, 3)}, DType::u8, d), out = device_tensor(x.shape(), DType::f32, d);
  fewbit_encode(c, &pointwise_by_name("gelu"), x, Tensor(), packed);
  run_against_copy(state, d, x, 2.0 * kTensorBytes + static_cast<double>(packed_bytes(kNumel, 3)),
                   [&] { fewbit_decode(c, packed, grad, out); });
}

// Argument: 0 mixed 2/4 bits at 0.5 per bucket; 1 deterministic 4 bits (round to nearest).
MixedQuantConfig mixed_config(int64_t which) {
  MixedQuantConfig c;  // affine, buckets of 512, bf16 metadata
  if (which == 1) {
    c.base = c.mix = affine_width(4);
    c.rounding = Rounding::Nearest;
    c.mix_prob = 0.0;
  }
  return c;
}

void MixedQuantize(benchmark::State& state, Device d) {
  make_current(d);
  const MixedQuantConfig c = mixed_config(state.range(0));
  const Tensor x = uniform_input(d, 1, -1.0f, 3.0f);
  TagScope tag(MemTag::Saved);
  const int64_t held = quantize_mixed(x, c, {1, 42}).bytes();  // (about: each draw's mix differs)
  uint64_t step = 0;
  run_against_copy(state, d, x, kTensorBytes + static_cast<double>(held),
                   [&] { benchmark::DoNotOptimize(quantize_mixed(x, c, {1, quant_stream(step++, 0)})); });
}

void MixedDequantize(benchmark::State& state, Device d) {
  make_current(d);
  const MixedQuantConfig c = mixed_config(state.range(0));
  const Tensor x = uniform_input(d, 1, -1.0f, 3.0f);
  TagScope tag(MemTag::Saved);
  const MixedPacked p = quantize_mixed(x, c, {1, 42});
  const Tensor out = device_tensor(x.shape(), DType::f32, d);
  run_against_copy(state, d, x, kTensorBytes + static_cast<double>(p.bytes()), [&] { dequantize_mixed(p, out); });
}

// The mixed 2/4-bit buckets of an NHWC tensor of 64 Mi elements, (1024, 64, 32, 32), in plain
// order (quant/mixed/nhwc_buckets.h): the quantize stages each block's buckets through shared memory,
// the decode writes NHWC from the block's codes. Argument: 0 quantize, 1 dequantize, 2 a GELU's
// backward.
void MixedNhwc(benchmark::State& state, Device d) {
  make_current(d);
  Tensor plain = device_tensor(Shape{1024, kC, 32, 32}, DType::f32, d);  // (N, C, H, W)
  backend(d).fill_uniform(plain, -1.0f, 3.0f, 7, 1, 0);
  const Tensor x = backend(d).to_layout(plain, Layout::NHWC);
  const MixedQuantConfig c = mixed_config(0);
  if (mixed_codec_order(x.shape(), x.layout(), d, c.bucket_size).via_plain) {
    state.SkipWithError("these buckets are not staged (mixed_codec_order)");
    return;
  }
  TagScope tag(MemTag::Saved);
  const MixedPacked p = quantize_mixed(x, c, {1, 42});
  const Tensor out = Tensor::empty(x.shape(), DType::f32, Layout::NHWC, MemTag::Workspace, d);
  const double held = static_cast<double>(p.bytes());  // (about, for the quantize: each draw's mix differs)
  uint64_t step = 0;
  switch (state.range(0)) {
    case 0:
      return run_against_copy(state, d, x, kTensorBytes + held, [&] {
        benchmark::DoNotOptimize(quantize_mixed(x, c, {1, quant_stream(step++, 0)}));
      });
    case 1:
      return run_against_copy(state, d, x, kTensorBytes + held, [&] { dequantize_mixed(p, out); });
    default:
      return run_against_copy(state, d, x, 2.0 * kTensorBytes + held,
                              [&] { dequantize_mixed_apply(p, ActivationId::gelu, false, x, out); });
  }
}

// Registered only when a GPU is visible (a benchmark that cannot run is not listed).
[[maybe_unused]] const bool kRegistered = [] {
  for (Backend* b : available_backends()) {
    if (b->device().is_cpu()) continue;
    const Device d = b->device();
    auto add = [&](const char* name, void (*fn)(benchmark::State&, Device)) {
      return benchmark::RegisterBenchmark(name, [fn, d](benchmark::State& s) { fn(s, d); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    };
    for (auto* r : {add("CodecCuda/GroupQuantize", GroupQuantize), add("CodecCuda/GroupDequantize", GroupDequantize)})
      r->ArgName("bits")->Arg(1)->Arg(2)->Arg(4)->Arg(8);
    for (auto* r : {add("CodecCuda/GroupNhwcPerPlane", GroupNhwcPerPlane), add("CodecCuda/GroupNhwcPerSample", GroupNhwcPerSample)})
      r->ArgName("quantize0_dequantize1_gelu2")->Arg(0)->Arg(1)->Arg(2);
    add("CodecCuda/FewbitEncodeGelu3", FewbitEncode);
    add("CodecCuda/FewbitApplyGelu3", FewbitApply);
    for (auto* r : {add("CodecCuda/MixedQuantize", MixedQuantize), add("CodecCuda/MixedDequantize", MixedDequantize)})
      r->ArgName("deterministic4")->Arg(0)->Arg(1);
    add("CodecCuda/MixedNhwc", MixedNhwc)->ArgName("quantize0_dequantize1_gelu2")->Arg(0)->Arg(1)->Arg(2);
    return true;  // the first GPU
  }
  std::fprintf(stderr, "codec_cuda_bench: no GPU is visible, the CodecCuda benchmarks are not registered\n");
  return false;
}();

}  // namespace
}  // namespace packrat
