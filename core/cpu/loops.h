#pragma once
// Loop helpers shared by the CPU backend's elementwise, row, dropout and shape primitives.
#include <cstdint>
#include <cstring>

#include "core/allocator.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace packrat::cpu {

// (kMinParallelWork and rows_for, the threshold below which loops stay on the calling thread:
// core/parallel.h.)

// Grains of the chunked elementwise loops (parallel_chunks): pointwise activations and
// optimizer updates, and the cheaper binary / mask loops.
constexpr int64_t kPointwiseGrain = kMinParallelWork / 2;
constexpr int64_t kBinaryGrain = kMinParallelWork;

// A new CPU tensor under the thread's TagScope, whatever the DeviceScope says.
inline Tensor empty_cpu(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain) {
  return Tensor::empty(shape, dtype, layout, TagScope::current(), Device::cpu());
}
inline Tensor zeros_cpu(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain) {
  Tensor t = empty_cpu(shape, dtype, layout);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

// fn(T*) on t's buffer, T its element type: float, or bf16_t for the loops that read bf16 as it
// lies (rows_read, dropout_reads). Throws naming `op` for any other dtype.
template <typename Fn>
void with_f32_or_bf16_data(const Tensor& t, const char* op, Fn&& fn) {
  if (t.dtype() == DType::f32) fn(static_cast<float*>(t.raw()));
  else if (t.dtype() == DType::bf16) fn(static_cast<bf16_t*>(t.raw()));
  else fail("{}: {} is neither f32 nor bf16", op_where(op), t.describe());
}

}  // namespace packrat::cpu
