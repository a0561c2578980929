// The CPU backend's binary ops on the shapes a convolutional step feeds them, in f32 and bf16:
// a residual addition of two equal-layout activations (ResNet-18's 64-channel 32x32 at batch 64)
// and squeeze-and-excitation's per-channel product (EfficientNet-B0's 96-channel 16x16 at batch
// 32, x blocked, the scale (N, C, 1, 1)). GB/s counts the bytes read and written once.
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='Binary'
#include <benchmark/benchmark.h>

#include <string>

#include "core/backend.h"
#include "core/cpu/dnnl_context.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace packrat {
namespace {

Tensor uniform(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  PhiloxStream rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform() * 2.0f - 1.0f;
  return t;
}

// range(0): 0 f32, 1 bf16.
void run(benchmark::State& state, const Shape& a_shape, const Shape& b_shape, BinaryOp op) {
  const DType dtype = state.range(0) ? DType::bf16 : DType::f32;
  Backend& be = backend(Device::cpu());
  if (!be.binary_reads(dtype)) {
    state.SkipWithError("this backend's binary ops do not read this dtype");
    return;
  }
  const Tensor a = uniform(a_shape, 1).to_layout(cpu::native_blocked_layout()).to(dtype);
  Tensor b = uniform(b_shape, 2).to(dtype);
  if (b_shape == a_shape) b = b.to_layout(a.layout());
  for (auto _ : state) benchmark::DoNotOptimize(be.binary(op, a, b).raw());
  const double bytes = static_cast<double>((2 * a.numel() + b.numel()) * dtype_size(dtype));
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)));
}

void BM_BinaryResidualAdd(benchmark::State& state) { run(state, {64, 64, 32, 32}, {64, 64, 32, 32}, BinaryOp::Add); }
void BM_BinaryChannelProduct(benchmark::State& state) { run(state, {32, 96, 16, 16}, {32, 96, 1, 1}, BinaryOp::Mul); }
BENCHMARK(BM_BinaryResidualAdd)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_BinaryChannelProduct)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace packrat
