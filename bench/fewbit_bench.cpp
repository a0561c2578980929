// Few-bit GELU forward + backward against FP32 GELU forward + backward on a (64, 64, 32, 32)
// tensor, through the store interface the activation op uses (forward_and_save, then
// apply_derivative, then release). Counters: ms per pass of each, their ratio (target <= 1.1),
// and the saved bytes of the few-bit store over FP32's (3/32 at 3 bits). BM_FewBitEncode: the
// codec's forward half alone, SiLU's shipped table's codes of a (128, 96, 16, 16) tensor, with
// the SiLU forward fused in (as the store runs it) or without; counter ns a value.
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='FewBit'
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/pointwise.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/fewbit/fewbit_store.h"
#include "quant/fewbit/fewbit_table.h"

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

// The packed codes of SiLU's shipped `bits`-bit table (and y = SiLU(x) when `forward`).
void BM_FewBitEncode(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const bool forward = state.range(1) != 0;
  FewbitCoder c;
  c.bits = bits;
  for (const FewbitTable& t : shipped_fewbit_tables())
    if (t.fn == "silu" && t.bits == bits) c.lut = t.lut();
  const int64_t n = int64_t{128} * 96 * 16 * 16;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));  // (n,)
  PhiloxStream s(3, 0);
  for (float& v : x) v = s.uniform() * 12.0f - 6.0f;
  std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n, bits)));  // (packed_bytes(n, bits),)
  const Pointwise* silu = &pointwise_by_name("silu");
  for (auto _ : state) {
    fewbit_encode(c, silu, x.data(), sizeof(float), forward ? y.data() : nullptr, n, packed.data());
    benchmark::DoNotOptimize(packed.data());
  }
  state.counters["ns_per_value"] =
      benchmark::Counter(static_cast<double>(n) * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FewBitEncode)->ArgsProduct({{1, 2, 3, 4}, {0, 1}})->ArgNames({"bits", "forward"})->UseRealTime();

}  // namespace
}  // namespace packrat
