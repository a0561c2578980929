// Mixed 2/4-bit per-bucket quantize+pack (and unpack+dequantize) against fixed 2-bit and fixed
// 4-bit on the same f32 tensor (64, 64, 32, 32), all timed back to back in each iteration so that
// the load of the shared machine affects every side alike. Fixed widths are measured twice: with
// the per-group quantizer (quant/group/group_quant.h, flat groups of the bucket size) and with this
// quantizer at mix_prob 0 and 1. Counters: GB/s of f32 data for each, and the ratios
// mix_vs_fixed4 = time(fixed 4-bit, per-group) / time(2/4 mix)  (target: >= 1/1.3 = 0.77),
// mix_vs_fixed2 likewise, and mix_vs_own4 against this quantizer's fixed 4-bit.
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='MixedQuant'
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "core/cpu/layout.h"
#include "bench/codec_bench_input.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/group/group_quant.h"
#include "quant/mixed/mixed_quant.h"

namespace packrat {
namespace {

using namespace codec_bench;  // kN, kC, kH, kW, kNumel, make_input

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  benchmark::ClobberMemory();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

MixedQuantConfig mixed_config(ScaleRule rule, int base, int mix, double p, int64_t bucket) {
  MixedQuantConfig c;
  c.scale = rule;
  c.base = width_for_bits(rule, base);
  c.mix = width_for_bits(rule, mix);
  c.mix_prob = p;
  c.bucket_size = bucket;
  return c;
}

// The per-group quantizer's geometry at `bits`, in flat groups of a bucket's size: the fixed
// widths the mix is measured against.
GroupGeometry flat_groups(int64_t bucket, int bits) {
  GroupQuantConfig gc;
  gc.group_size = bucket;
  gc.grouping = Grouping::Flat;
  gc.bits = bits;
  return group_geometry(kNumel, kN, gc);
}

struct Side {
  const char* name;
  std::function<void()> run;
  double s = 0;
};

void report(benchmark::State& state, std::vector<Side>& sides) {
  const double bytes = static_cast<double>(kNumel) * 4 * static_cast<double>(state.iterations());
  for (const Side& s : sides) state.counters[std::string(s.name) + "_GBps"] = bytes / s.s / 1e9;
  const double mix = sides[0].s;
  state.counters["mix_vs_fixed2"] = sides[1].s / mix;
  state.counters["mix_vs_fixed4"] = sides[2].s / mix;
  state.counters["mix_vs_own4"] = sides[4].s / mix;
}

// Arguments: bucket size, scale rule (0 affine, 1 maxabs), decision (0 per bucket, 1 per tensor).
void BM_MixedQuant_Quantize(benchmark::State& state) {
  const int64_t bucket = state.range(0);
  const ScaleRule rule = state.range(1) ? ScaleRule::MaxAbs : ScaleRule::Affine;
  const Tensor x = make_input();
  const GroupGeometry g2 = flat_groups(bucket, 2), g4 = flat_groups(bucket, 4);
  Tensor codes = Tensor::empty({g4.code_bytes()}, DType::u8), meta = Tensor::empty({g4.meta_bytes()}, DType::u8);
  MixedQuantConfig mix = mixed_config(rule, 2, 4, 0.5, bucket);
  mix.decision = state.range(2) ? MixDecision::PerTensor : MixDecision::PerBucket;
  const MixedQuantConfig own2 = mixed_config(rule, 2, 2, 0.0, bucket), own4 = mixed_config(rule, 4, 4, 0.0, bucket);
  const float* xp = x.data<float>();
  uint64_t step = 0;
  double mix_bits = 0;
  std::vector<Side> sides = {
      {"mix24", [&] {
         const MixedPacked p = quantize_mixed(xp, kNumel, mix, {1, quant_stream(step++, 0)});
         mix_bits += p.code_bits_per_element();
       }},
      {"group2", [&] { quantize_groups(xp, g2, Rounding::Stochastic, {1, 42}, codes.data<uint8_t>(), meta.data<uint8_t>()); }},
      {"group4", [&] { quantize_groups(xp, g4, Rounding::Stochastic, {1, 42}, codes.data<uint8_t>(), meta.data<uint8_t>()); }},
      {"own2", [&] { quantize_mixed(xp, kNumel, own2, {1, 42}); }},
      {"own4", [&] { quantize_mixed(xp, kNumel, own4, {1, 42}); }},
  };
  for (auto _ : state)
    for (Side& s : sides) s.s += seconds(s.run);
  report(state, sides);
  state.counters["mix_code_bits"] = mix_bits / static_cast<double>(state.iterations());
}

void BM_MixedQuant_Dequantize(benchmark::State& state) {
  const int64_t bucket = state.range(0);
  const ScaleRule rule = state.range(1) ? ScaleRule::MaxAbs : ScaleRule::Affine;
  const Tensor x = make_input();
  Tensor y = Tensor::empty_like(x);
  const GroupGeometry g2 = flat_groups(bucket, 2), g4 = flat_groups(bucket, 4);
  Tensor c2 = Tensor::empty({g2.code_bytes()}, DType::u8), m2 = Tensor::empty({g2.meta_bytes()}, DType::u8);
  Tensor c4 = Tensor::empty({g4.code_bytes()}, DType::u8), m4 = Tensor::empty({g4.meta_bytes()}, DType::u8);
  quantize_groups(x.data<float>(), g2, Rounding::Stochastic, {1, 42}, c2.data<uint8_t>(), m2.data<uint8_t>());
  quantize_groups(x.data<float>(), g4, Rounding::Stochastic, {1, 42}, c4.data<uint8_t>(), m4.data<uint8_t>());
  const MixedPacked mix = quantize_mixed(x.data<float>(), kNumel, mixed_config(rule, 2, 4, 0.5, bucket), {1, 42});
  const MixedPacked own2 = quantize_mixed(x.data<float>(), kNumel, mixed_config(rule, 2, 2, 0.0, bucket), {1, 42});
  const MixedPacked own4 = quantize_mixed(x.data<float>(), kNumel, mixed_config(rule, 4, 4, 0.0, bucket), {1, 42});
  float* yp = y.data<float>();
  std::vector<Side> sides = {
      {"mix24", [&] { dequantize_mixed(mix, yp); }},
      {"group2", [&] { dequantize_groups(c2.data<uint8_t>(), m2.data<uint8_t>(), g2, yp); }},
      {"group4", [&] { dequantize_groups(c4.data<uint8_t>(), m4.data<uint8_t>(), g4, yp); }},
      {"own2", [&] { dequantize_mixed(own2, yp); }},
      {"own4", [&] { dequantize_mixed(own4, yp); }},
  };
  for (auto _ : state)
    for (Side& s : sides) s.s += seconds(s.run);
  report(state, sides);
}

// Quantize and dequantize of the plain tensor x with config c and of its copy in the CPU's blocked
// layout, back to back. Counters: GB/s of f32 data for each, and blocked_vs_plain_{quantize,
// dequantize} = time(plain) / time(blocked) (< 1: the blocked walk costs that much).
void time_blocked_against_plain(benchmark::State& state, const Tensor& x, const MixedQuantConfig& c) {
  const Tensor xb = x.to_layout(cpu::native_blocked_layout());
  const MixedPacked p = quantize_mixed(x, c, {1, 42});
  Tensor y = Tensor::empty_like(x), yb = Tensor::empty_like(xb);
  std::vector<Side> sides = {
      {"plain_quantize", [&] { quantize_mixed(x, c, {1, 42}); }},
      {"blocked_quantize", [&] { quantize_mixed(xb, c, {1, 42}); }},
      {"plain_dequantize", [&] { dequantize_mixed(p, y); }},
      {"blocked_dequantize", [&] { dequantize_mixed(p, yb); }},
  };
  for (auto _ : state)
    for (Side& s : sides) s.s += seconds(s.run);
  const double bytes = static_cast<double>(x.numel()) * 4 * static_cast<double>(state.iterations());
  for (const Side& s : sides) state.counters[std::string(s.name) + "_GBps"] = bytes / s.s / 1e9;
  state.counters["blocked_vs_plain_quantize"] = sides[0].s / sides[1].s;
  state.counters["blocked_vs_plain_dequantize"] = sides[2].s / sides[3].s;
}

// The codes follow the tensor's logical order: a blocked tensor (the CPU convolutions' layout:
// nChw16c with AVX-512, nChw8c without) is walked in plain order (quant/cpu/plain_runs.h). 2/4 mix at
// p = 0.5, buckets of 512.
void BM_MixedQuant_Blocked(benchmark::State& state) {
  time_blocked_against_plain(state, make_input(), mixed_config(ScaleRule::Affine, 2, 4, 0.5, 512));
}

// The shipped EfficientNetV2 config's codec (max-abs, 2 bits a side: 4-bit codes, buckets of 512, one
// width) on a (128, C, side, side) f32 tensor: side 4 and 2 (C 256 and 512: in the blocked layout a
// bucket is whole tiles) and 16 (C 64: two lanes of a tile), the blocked buffer's buckets taken
// where they lie (quant/cpu/bucket_tiles.h).
void BM_MixedQuant_BlockedPlanes(benchmark::State& state) {
  const int64_t side = state.range(0), channels = side == 16 ? 64 : (side == 4 ? 256 : 512);
  Tensor x = Tensor::empty({128, channels, side, side});  // (N, C, H, W)
  PhiloxStream r(5, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = r.uniform() * 4.0f - 2.0f;
  time_blocked_against_plain(state, x, mixed_config(ScaleRule::MaxAbs, 2, 2, 0.0, 512));
}

// A GELU's backward from 2/4-bit bucket codes on the CPU: the store's two passes (dequantize into a
// tensor, then the backend's pointwise_backward) against dequantize_mixed_apply's one (the bodies
// a GPU runs, bucket by bucket here). Counters: GB/s of f32 elements for each, and
// one_vs_two = time(two passes) / time(one pass) (> 1: the one pass is faster).
void BM_MixedQuant_ApplyDerivative(benchmark::State& state) {
  const ScaleRule rule = state.range(0) ? ScaleRule::MaxAbs : ScaleRule::Affine;
  const Tensor x = make_input();
  const Tensor grad = make_input(), gx = Tensor::empty_like(x), values = Tensor::empty_like(x);
  const MixedPacked p = quantize_mixed(x.data<float>(), kNumel, mixed_config(rule, 2, 4, 0.5, 512), {1, 42});
  Backend& cpu = backend(Device::cpu());
  double two = 0, one = 0;
  for (auto _ : state) {
    two += seconds([&] {
      dequantize_mixed(p, values.data<float>());
      cpu.pointwise_backward(ActivationId::gelu, values, grad, false);
    });
    one += seconds([&] { dequantize_mixed_apply(p, ActivationId::gelu, false, grad, gx); });
  }
  const double bytes = static_cast<double>(kNumel) * 4 * static_cast<double>(state.iterations());
  state.counters["two_passes_GBps"] = bytes / two / 1e9;
  state.counters["one_pass_GBps"] = bytes / one / 1e9;
  state.counters["one_vs_two"] = two / one;
}

BENCHMARK(BM_MixedQuant_Quantize)
    ->ArgNames({"bucket", "maxabs", "per_tensor"})
    ->Args({512, 0, 0})
    ->Args({128, 0, 0})
    ->Args({64, 0, 0})
    ->Args({512, 0, 1})
    ->Args({512, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MixedQuant_Blocked)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MixedQuant_BlockedPlanes)->ArgName("side")->Arg(4)->Arg(2)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MixedQuant_Dequantize)
    ->ArgNames({"bucket", "maxabs"})
    ->Args({512, 0})
    ->Args({64, 0})
    ->Args({512, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MixedQuant_ApplyDerivative)->ArgName("maxabs")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace packrat
