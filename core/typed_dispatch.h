#pragma once
// fn(T*) with a buffer typed by its DType, for kernels and launchers that serve every dtype
// (fill, convert, copies of shape ops), on the CPU and in CUDA launchers alike (CUDA-free).
#include <cstdint>

#include "core/dtype.h"

namespace packrat {

template <typename Fn>
void with_typed(void* p, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(static_cast<float*>(p)); break;
    case DType::f64: fn(static_cast<double*>(p)); break;
    case DType::u8: fn(static_cast<uint8_t*>(p)); break;
    case DType::i32: fn(static_cast<int32_t*>(p)); break;
    case DType::i64: fn(static_cast<int64_t*>(p)); break;
    case DType::bf16: fn(static_cast<bf16_t*>(p)); break;
    case DType::f16: fn(static_cast<f16_t*>(p)); break;
  }
}

}  // namespace packrat
