// The CPU's pointwise loops: one single loop per function over the inlined branch-free scalar
// code of core/pointwise_math.h, which GCC -O3 -march=native vectorises whole.
#include "core/cpu/pointwise_loops.h"

#include "core/error.h"
#include "core/pointwise_math.h"

namespace packrat::cpu {
namespace {

template <class A>
void forward_loop(const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = A::f(x[i]);
}

template <class A>
void derivative_loop(const float* __restrict x, float* __restrict d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = A::df(x[i]);
}

template <class A>
void derivative_from_output_loop(const float* __restrict y, float* __restrict d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = A::df_from_output(y[i]);
}

template <ActivationId Id>
constexpr PointwiseLoops loops_of() {
  using A = Activation<Id>;
  PointwiseLoop from_output = nullptr;
  if constexpr (A::kFromOutput) from_output = derivative_from_output_loop<A>;
  return {activation_name(Id), forward_loop<A>, derivative_loop<A>, from_output};
}

// Indexed by ActivationId.
#define PACKRAT_LOOPS(ID, DERIVATIVE, EVEN, STEP) loops_of<ActivationId::ID>(),
const PointwiseLoops kLoops[] = {PACKRAT_ACTIVATIONS(PACKRAT_LOOPS)};
#undef PACKRAT_LOOPS
static_assert(sizeof(kLoops) / sizeof(kLoops[0]) == kNumActivations);

}  // namespace

const PointwiseLoops& pointwise_loops(ActivationId id) {
  const auto i = static_cast<size_t>(id);
  PACKRAT_CHECK(i < static_cast<size_t>(kNumActivations), "activation: unknown id {}", i);
  return kLoops[i];
}

}  // namespace packrat::cpu
