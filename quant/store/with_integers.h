#pragma once
// Calls fn(p) with p the integer tensor's typed host pointer (u8, i32 or i64): the host loops over
// masks and indices (quant/bits/bitpack.cpp, quant/store/compressing_store.cpp).
#include <cstdint>

#include "core/tensor.h"

namespace packrat {

template <typename Fn>
void with_integers(const Tensor& x, Fn&& fn) {
  switch (x.dtype()) {
    case DType::u8: fn(x.data<uint8_t>()); break;
    case DType::i32: fn(x.data<int32_t>()); break;
    default: fn(x.data<int64_t>()); break;
  }
}

}  // namespace packrat
