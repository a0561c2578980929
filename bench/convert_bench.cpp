// Dtype conversions of an activation-sized tensor on the CPU: f32 -> bf16 (a convolution's output
// gradient for its 16-bit kernels) and bf16 -> f32 (a saved 16-bit input for an f32 kernel), by
// packrat's conversion (Tensor::to, SIMD lanes) and by a oneDNN reorder of the same layout.
// EfficientNet-B0's largest: (32, 96, 32, 32) channels-last. GB/s counts bytes read and written.
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='Convert'
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "core/cpu/dnnl_context.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace packrat {
namespace {

// range(0): 0 f32 -> bf16, 1 bf16 -> f32; range(1): 0 Tensor::to, 1 oneDNN's reorder.
void BM_Convert(benchmark::State& state) {
  const bool widen = state.range(0) != 0, onednn = state.range(1) != 0;
  Tensor f32 = Tensor::empty({32, 96, 32, 32}, DType::f32, Layout::NHWC);  // (N, C, H, W) channels-last
  PhiloxStream rng(1, 0);
  for (float& v : f32.span<float>()) v = rng.uniform() * 2.0f - 1.0f;
  const Tensor src = widen ? f32.to(DType::bf16) : f32;
  const DType to = widen ? DType::f32 : DType::bf16;
  for (auto _ : state) {
    if (onednn) {
      Tensor out = Tensor::empty(src.shape(), to, Layout::NHWC);
      cpu::reorder(cpu::memory_of(src), cpu::memory_of(out));
      benchmark::DoNotOptimize(out);
    } else {
      benchmark::DoNotOptimize(src.to(to));
    }
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(src.numel()) * 6 / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("{} by {}", widen ? "bf16 -> f32" : "f32 -> bf16", onednn ? "oneDNN" : "Tensor::to"));
}
BENCHMARK(BM_Convert)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace packrat
