// Memory-efficient attention against the standard path, side by side: each iteration runs the
// standard path's forward + backward and then the memory-efficient one's on the same q, k, v
// (batch 8, 2 heads of 64, self-attention of T), so both see the same machine state. Counters:
// standard_ms and memory_efficient_ms per forward + backward, and speedup = standard / memory-efficient
// (> 1: memory-efficient is faster); also each path's saved bytes per sample (FP32 store).
//
//   build/bin/packrat_bench --benchmark_filter='AttentionSideBySide'
#include <benchmark/benchmark.h>

#include <chrono>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/tensor.h"

namespace packrat {
namespace {

constexpr int64_t kBatch = 8, kHeads = 2, kHeadDim = 64;

// One forward + backward; returns its seconds and the bytes saved for backward.
double fwd_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seed, bool memory_efficient,
               bool causal, int64_t& saved_bytes) {
  ops::AttentionOptions o;
  o.memory_efficient = memory_efficient;
  o.causal = causal;
  Fp32Policy policy;
  PolicyScope scope(policy);
  const auto t0 = std::chrono::steady_clock::now();
  Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
  saved_bytes = 0;
  for (const SavedRecord& r : policy.describe()) saved_bytes += r.bytes;
  backward(y, seed);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_AttentionSideBySide(benchmark::State& state) {
  const int64_t T = state.range(0);
  const bool causal = state.range(1) != 0;
  const Shape shape{kBatch, kHeads, T, kHeadDim};
  Tensor q = Tensor::empty(shape), k = Tensor::empty(shape), v = Tensor::empty(shape);
  for (Tensor* t : {&q, &k, &v}) {
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    t->set_requires_grad(true);
  }
  const Tensor seed = Tensor::full(shape, 1.0f);
  double standard = 0, efficient = 0;
  int64_t standard_bytes = 0, efficient_bytes = 0;
  for (auto _ : state) {
    standard += fwd_bwd(q, k, v, seed, false, causal, standard_bytes);
    efficient += fwd_bwd(q, k, v, seed, true, causal, efficient_bytes);
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["standard_ms"] = 1e3 * standard / n;
  state.counters["memory_efficient_ms"] = 1e3 * efficient / n;
  state.counters["speedup"] = standard / efficient;
  state.counters["standard_saved_MiB_per_sample"] = static_cast<double>(standard_bytes) / kBatch / (1 << 20);
  state.counters["memory_efficient_saved_MiB_per_sample"] = static_cast<double>(efficient_bytes) / kBatch / (1 << 20);
}
BENCHMARK(BM_AttentionSideBySide)
    ->ArgsProduct({{128, 256, 512, 1024, 2048, 4096}, {0, 1}})
    ->ArgNames({"T", "causal"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace packrat
