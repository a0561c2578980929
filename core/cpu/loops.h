#pragma once
// Loop helpers shared by the CPU backend's elementwise, row, dropout and shape primitives.
#include <cstdint>
#include <cstring>

#include "core/allocator.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace packrat::cpu {

// Below this many elements of work a loop runs on the calling thread: an OpenMP region costs
// more than it saves on tiny tensors (and much more when the machine is oversubscribed).
constexpr int64_t kMinParallelWork = 1 << 15;

// Grains of the chunked elementwise loops (parallel_chunks): pointwise activations and
// optimizer updates, and the cheaper binary / mask loops.
constexpr int64_t kPointwiseGrain = 1 << 14;
constexpr int64_t kBinaryGrain = 1 << 15;

// A new CPU tensor under the thread's TagScope, whatever the DeviceScope says.
inline Tensor empty_cpu(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain) {
  return Tensor::empty(shape, dtype, layout, TagScope::current(), Device::cpu());
}
inline Tensor zeros_cpu(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain) {
  Tensor t = empty_cpu(shape, dtype, layout);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

// fn(i) for i in [0, n); parallel only when n * work_per_item is large enough.
template <typename Fn>
void rows_for(int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n * work_per_item < kMinParallelWork) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    parallel_for(0, n, fn);
  }
}

}  // namespace packrat::cpu
