// The bulk GELU loops against the scalar libm formula, 0.5 x (1 + erf(x / sqrt 2)), on 2^18
// floats: a loop that falls back to scalar code (e.g. a branch that defeats if-conversion) runs
// at libm speed. Thread CPU time, best of 7. Counters: libm time over forward time and over
// derivative time (the unit suite used to require > 3 and > 2; on an AVX2 EPYC they fall short:
// a measurement, not a test).
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='GeluLoops'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <vector>

#include "autograd/pointwise.h"

namespace packrat {
namespace {

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void BM_GeluLoopsOverScalarLibm(benchmark::State& state) {
  constexpr int64_t n = 1 << 18;
  std::vector<float> x(n), y(n);  // (n)
  for (int64_t i = 0; i < n; ++i) x[i] = 4.0f * std::sin(0.001f * static_cast<float>(i));
  const Pointwise& fn = pointwise_by_name("gelu");
  double t_fwd = 1e9, t_df = 1e9, t_libm = 1e9;
  for (auto _ : state) {
    for (int r = 0; r < 7; ++r) {
      double t0 = thread_cpu_seconds();
      fn.forward(x.data(), y.data(), n);
      t_fwd = std::min(t_fwd, thread_cpu_seconds() - t0);
      t0 = thread_cpu_seconds();
      fn.derivative(x.data(), y.data(), n);
      t_df = std::min(t_df, thread_cpu_seconds() - t0);
      t0 = thread_cpu_seconds();
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
      t_libm = std::min(t_libm, thread_cpu_seconds() - t0);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["libm_over_forward"] = t_libm / t_fwd;
  state.counters["libm_over_derivative"] = t_libm / t_df;
  state.counters["forward_us"] = t_fwd * 1e6;
  state.counters["libm_us"] = t_libm * 1e6;
}
BENCHMARK(BM_GeluLoopsOverScalarLibm)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace packrat
