// GELU forward + backward through the FP32 store (the path ops::gelu and its backward take:
// forward_and_save, apply_derivative, release) on a (64, 64, 32, 32) tensor, against a plain
// memcpy of the same tensor measured in the same iterations. Counters: bytes/s of the tensor
// (one fwd+bwd pass per tensor), ms per pass, and fwd+bwd time over memcpy time.
// PyTorch's F.gelu fwd+bwd on the same shape: bench/activation_bench_torch.py.
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='Activation'
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <ctime>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace packrat {
namespace {

constexpr int64_t kN = 64, kC = 64, kH = 32, kW = 32;

Tensor make_input(uint64_t seed) {
  Tensor t = Tensor::empty({kN, kC, kH, kW});  // (N, C, H, W)
  PhiloxStream s(seed, 0);
  for (auto& v : t.span<float>()) v = s.uniform() * 8.0f - 4.0f;
  return t;
}

// CPU time of the whole process (both OpenMP threads): on a shared, oversubscribed machine wall
// time mostly measures waiting for a core.
double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each iteration runs the activation pass and a memcpy back to back, so the shared machine's load
// changes affect both alike; the ratio is taken over the sums.
void run(benchmark::State& state, const char* name) {
  const Tensor x = make_input(1), g = make_input(2);
  Tensor copy = Tensor::empty_like(x);  // (N, C, H, W)
  SaveRequest req;
  req.need = Need::Derivative;
  req.fn = &pointwise_by_name(name);
  req.op = req.fn->name;
  req.name = "bench.act";
  Fp32Store store;
  double t_act = 0, t_copy = 0, cpu_act = 0, cpu_copy = 0;
  for (auto _ : state) {
    double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    auto [y, h] = store.forward_and_save(x, req);
    Tensor gx = store.apply_derivative(h, g);
    store.release(h);
    benchmark::DoNotOptimize(y.raw());
    benchmark::DoNotOptimize(gx.raw());
    t_act += seconds_since(t0);
    cpu_act += process_cpu_seconds() - c0;
    c0 = process_cpu_seconds();
    t0 = std::chrono::steady_clock::now();
    std::memcpy(copy.raw(), x.raw(), x.nbytes());
    benchmark::ClobberMemory();
    t_copy += seconds_since(t0);
    cpu_copy += process_cpu_seconds() - c0;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["tensor_bytes_per_s"] = benchmark::Counter(static_cast<double>(x.nbytes()) * n / t_act);
  state.counters["ms_per_fwd_bwd"] = 1e3 * t_act / n;
  state.counters["ms_per_memcpy"] = 1e3 * t_copy / n;
  state.counters["fwd_bwd_over_memcpy"] = t_act / t_copy;
  state.counters["cpu_ms_per_fwd_bwd"] = 1e3 * cpu_act / n;  // summed over threads
  state.counters["cpu_ms_per_memcpy"] = 1e3 * cpu_copy / n;
}

void BM_ActivationGeluFp32FwdBwd(benchmark::State& state) { run(state, "gelu"); }
void BM_ActivationReluFp32FwdBwd(benchmark::State& state) { run(state, "relu"); }
void BM_ActivationSiluFp32FwdBwd(benchmark::State& state) { run(state, "silu"); }

// The same through the op and the tape (ops::gelu, backward), leaf gradient buffer included.
void BM_ActivationGeluOpAndTape(benchmark::State& state) {
  Tensor x = make_input(1).set_requires_grad(true);
  const Tensor g = make_input(2);
  double t = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = ops::gelu(x);
    backward(y, g);
    benchmark::DoNotOptimize(x.grad().raw());
    t += seconds_since(t0);
    x.zero_grad();
  }
  state.counters["ms_per_fwd_bwd"] = 1e3 * t / static_cast<double>(state.iterations());
}

// Forward only (no grad): the bulk loop alone.
void BM_ActivationGeluForwardOnly(benchmark::State& state) {
  const Tensor x = make_input(1);
  NoGradScope ng;
  for (auto _ : state) {
    Tensor y = ops::gelu(x);
    benchmark::DoNotOptimize(y.raw());
  }
  state.SetBytesProcessed(static_cast<int64_t>(x.nbytes()) * state.iterations());
}

BENCHMARK(BM_ActivationGeluFp32FwdBwd)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ActivationReluFp32FwdBwd)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ActivationSiluFp32FwdBwd)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ActivationGeluOpAndTape)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_ActivationGeluForwardOnly)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace packrat
