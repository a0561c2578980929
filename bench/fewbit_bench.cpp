// Few-bit GELU forward + backward against FP32 GELU forward + backward on a (64, 64, 32, 32)
// tensor, through the store interface the activation op uses (forward_and_save, then
// apply_derivative, then release). Counters: ms per pass of each, their ratio (target <= 1.1),
// and the saved bytes of the few-bit store over FP32's (3/32 at 3 bits).
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='FewBit'
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/pointwise.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/fewbit/fewbit_store.h"

namespace packrat {
namespace {

constexpr int64_t kN = 64, kC = 64, kH = 32, kW = 32;

Tensor make_tensor(uint64_t seed) {
  Tensor t = Tensor::empty({kN, kC, kH, kW});  // (N, C, H, W)
  PhiloxStream s(seed, 0);
  for (auto& v : t.span<float>()) v = s.uniform() * 8.0f - 4.0f;
  return t;
}

SaveRequest gelu_request() {
  SaveRequest r;
  r.need = Need::Derivative;
  r.fn = &pointwise_by_name("gelu");
  r.op = "gelu";
  r.name = "bench.gelu";
  return r;
}

// One forward + backward of the activation through `store`; returns seconds and saved bytes.
double pass(SavedTensorStore& store, const Tensor& x, const Tensor& g, int64_t* saved_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [y, h] = store.forward_and_save(x, gelu_request());
  if (saved_bytes) {
    std::vector<SavedRecord> recs;
    store.describe(recs);
    *saved_bytes = recs.at(0).bytes;
  }
  Tensor gx = store.apply_derivative(h, g);
  store.release(h);
  benchmark::DoNotOptimize(gx.raw());
  benchmark::DoNotOptimize(y.raw());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The machine is shared: each iteration runs both passes back to back (order alternating) and
// the ratio is taken over the sums, so load changes affect both sides alike.
void BM_FewBitGeluVsFp32(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const Tensor x = make_tensor(1), g = make_tensor(2);
  Fp32Store fp32;
  FewbitStore fewbit({bits, {}});
  int64_t fp32_bytes = 0, fewbit_bytes = 0;
  pass(fp32, x, g, &fp32_bytes);  // warm-up (and the table lookup)
  pass(fewbit, x, g, &fewbit_bytes);
  double t32 = 0, tfb = 0;
  bool flip = false;
  for (auto _ : state) {
    if (flip) {
      tfb += pass(fewbit, x, g, nullptr);
      t32 += pass(fp32, x, g, nullptr);
    } else {
      t32 += pass(fp32, x, g, nullptr);
      tfb += pass(fewbit, x, g, nullptr);
    }
    flip = !flip;
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["fp32_ms"] = 1e3 * t32 / it;
  state.counters["fewbit_ms"] = 1e3 * tfb / it;
  state.counters["time_ratio"] = tfb / t32;
  state.counters["saved_bytes_ratio"] = static_cast<double>(fewbit_bytes) / static_cast<double>(fp32_bytes);
}
BENCHMARK(BM_FewBitGeluVsFp32)->DenseRange(1, 4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace packrat
