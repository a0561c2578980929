// The CUDA row primitives at GPT / ViT shapes, each against a device-to-device copy of the same
// tensor measured in the same iterations: `vs_copy` = primitive time / copy time (the copy reads
// and writes the tensor once: a memory-bound row op that reads and writes it once should sit near
// 1), `GB/s` = the bytes the primitive must move at least / its time. Skips without a GPU.
//
//   build-cuda/bin/packrat_bench --benchmark_filter='CudaRows'
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"

namespace packrat {
namespace {

Backend* first_gpu() {
  for (Backend* b : available_backends())
    if (!b->device().is_cpu()) return b;
  return nullptr;
}

Tensor random_on(Backend& b, const Shape& shape, uint64_t seed) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(shape);
  PhiloxStream s(seed, 0);
  for (auto& v : t.span<float>()) v = s.uniform() * 8.0f - 4.0f;
  return t.to(b.device());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `reps` calls of op, then of the copy, each followed by a host read of one element (a
// synchronous device-to-host copy waits for the work before it on the stream).
void run_pair(benchmark::State& state, Backend& b, const Shape& shape, double min_bytes,
              const std::function<void()>& op) {
  constexpr int kReps = 10;
  DeviceScope on(b.device());
  const Tensor src = random_on(b, shape, 9);
  Tensor dst = Tensor::empty_like(src);
  Tensor probe = Tensor::empty(Shape{1});
  auto sync = [&] { (void)probe.to(Device::cpu()); };
  op();  // warm-up: first-call allocations and module loading
  sync();
  double t_op = 0, t_copy = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) op();
    sync();
    t_op += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) b.copy(src, dst);
    sync();
    t_copy += seconds_since(t0);
  }
  const double calls = static_cast<double>(state.iterations()) * kReps;
  state.counters["us"] = 1e6 * t_op / calls;
  state.counters["vs_copy"] = t_op / t_copy;
  state.counters["GB/s"] = min_bytes * calls / t_op / 1e9;
}

#define PACKRAT_REQUIRE_GPU(b)                    \
  Backend* b = first_gpu();                       \
  if (b == nullptr) {                             \
    state.SkipWithError("no GPU is visible");     \
    return;                                       \
  }

// Attention scores of a small GPT, (N * heads * T, T) rows of T: 64 * 6 * 256 rows of 256, and as
// many elements in rows of 1024.
void BM_CudaRowsSoftmax(benchmark::State& state) {
  PACKRAT_REQUIRE_GPU(b);
  const int64_t T = state.range(0), rows = 64 * 6 * 256 * 256 / T;
  DeviceScope on(b->device());
  const Tensor x = random_on(*b, {rows, T}, 1), g = random_on(*b, {rows, T}, 2);
  const Tensor y = b->softmax_forward(x, 1.0f, DType::f32);
  const double bytes = 2.0 * 4 * rows * T;
  run_pair(state, *b, {rows, T}, state.range(1) ? 1.5 * bytes : bytes, [&] {
    if (state.range(1)) (void)b->softmax_backward(y, g, 1.0f, DType::f32);
    else (void)b->softmax_forward(x, 1.0f, DType::f32);
  });
}
BENCHMARK(BM_CudaRowsSoftmax)->ArgNames({"T", "backward"})->Args({256, 0})->Args({256, 1})->Args({1024, 0})->UseRealTime();

// Layernorm over (N * T, D) tokens, with the parameter gradients in backward.
void BM_CudaRowsLayerNorm(benchmark::State& state) {
  PACKRAT_REQUIRE_GPU(b);
  const int64_t rows = 64 * 256, D = state.range(0);
  DeviceScope on(b->device());
  const Tensor x = random_on(*b, {rows, D}, 3), g = random_on(*b, {rows, D}, 4);
  const Tensor w = random_on(*b, {D}, 5), bias = random_on(*b, {D}, 6);
  const auto fwd = b->layernorm_forward(x, w, bias, 1e-5f);
  const double bytes = 4.0 * rows * D;
  run_pair(state, *b, {rows, D}, state.range(1) ? 3 * bytes : 2 * bytes, [&] {
    if (state.range(1)) (void)b->layernorm_backward(x, fwd.mean, fwd.rstd, w, g, true, true);
    else (void)b->layernorm_forward(x, w, bias, 1e-5f);
  });
}
BENCHMARK(BM_CudaRowsLayerNorm)->ArgNames({"D", "backward"})->Args({384, 0})->Args({384, 1})->Args({768, 1})->UseRealTime();

// Cross-entropy over (N * T, vocab) logits with probabilities (forward includes its host sync):
// 64 * 256 tokens of a byte vocabulary, 2048 of GPT-2's.
void BM_CudaRowsCrossEntropy(benchmark::State& state) {
  PACKRAT_REQUIRE_GPU(b);
  const int64_t C = state.range(0), N = C > 4096 ? 2048 : 64 * 256;
  DeviceScope on(b->device());
  const Tensor logits = random_on(*b, {N, C}, 7);
  std::vector<double> tv(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) tv[static_cast<size_t>(n)] = static_cast<double>((n * 31) % C);
  const Tensor targets = [&] {
    DeviceScope on_cpu(Device::cpu());
    return Tensor::from_vector(Shape{N}, tv).to(DType::i64).to(b->device());
  }();
  run_pair(state, *b, {N, C}, 2.0 * 4 * N * C, [&] { (void)b->cross_entropy_forward(logits, targets, 0.1f, true, kNoIgnoreIndex); });
}
BENCHMARK(BM_CudaRowsCrossEntropy)->ArgNames({"C"})->Arg(256)->Arg(50304)->UseRealTime();

}  // namespace
}  // namespace packrat
