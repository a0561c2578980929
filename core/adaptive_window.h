#pragma once
// PyTorch's adaptive pooling windows: output i of `out` covers inputs [begin, end) of `in`,
// begin = floor(i * in / out), end = ceil((i + 1) * in / out). CUDA-free and fmt-free, for the
// CUDA kernels (core/cuda/kernels/pool.h), which cannot include core/backend.h; Backend's
// adaptive_window_begin/end forward here.
#include <cstdint>

#include "core/hd.h"

namespace packrat {

PACKRAT_HD constexpr int64_t adaptive_window_begin(int64_t i, int64_t in, int64_t out) { return i * in / out; }
PACKRAT_HD constexpr int64_t adaptive_window_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace packrat
