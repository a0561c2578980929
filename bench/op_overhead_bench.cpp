// The framework's own cost per op, what a GPU step at a small batch waits on: a chain of ops on
// tiny tensors (16 floats, so the arithmetic is nothing) through the tape, the FP32 store and the
// allocator, forward and backward, with the time per op (forward + its backward) as a counter.
// A GPU adds its launch (a few us) to each; on the CPU this is everything but the kernel.
//
//   OMP_NUM_THREADS=1 build/bin/packrat_bench --benchmark_filter='OpOverhead'
#include <benchmark/benchmark.h>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/tensor.h"

namespace packrat {
namespace {

// ops per iteration: `links` links of add, gelu, scale, plus the seed's backward.
void BM_OpOverhead(benchmark::State& state) {
  const int64_t links = state.range(0);
  Tensor x = Tensor::full({1, 4, 2, 2}, 0.5f);  // (N, C, H, W): 16 floats
  x.set_requires_grad(true);
  const Tensor seed = Tensor::full({1, 4, 2, 2}, 1.0f);
  for (auto _ : state) {
    Tensor y = x;
    for (int64_t i = 0; i < links; ++i) y = ops::scale(ops::gelu(ops::add(y, x)), 0.5f);
    backward(y, seed);
    x.zero_grad();
  }
  const double ops = 3.0 * static_cast<double>(links);
  // Seconds per op: a rate of ops per second, inverted.
  state.counters["per_op"] = benchmark::Counter(ops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_OpOverhead)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace packrat
