#pragma once
// fn(T*) with a buffer typed by its DType, for launchers that serve every dtype (fill, convert,
// copies of shape ops). CUDA-free: used by .cu and .cpp files alike.
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cuda {

template <typename Fn>
void with_typed(void* p, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(static_cast<float*>(p)); break;
    case DType::f64: fn(static_cast<double*>(p)); break;
    case DType::u8: fn(static_cast<uint8_t*>(p)); break;
    case DType::i32: fn(static_cast<int32_t*>(p)); break;
    case DType::i64: fn(static_cast<int64_t*>(p)); break;
  }
}

}  // namespace packrat::cuda
