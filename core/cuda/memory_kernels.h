#pragma once
// Launchers of the memory section's kernels (memory_kernels.cu). Kept free of CUDA and fmt
// types so that host code compiled by g++ calls them; the caller checks cudaGetLastError().
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cuda {

void launch_fill(void* p, DType dtype, int64_t n, double value);
void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
// (N, C, H, W) plain <-> channel-blocked (the CPU's nChw16c or nChw8c: `block` 16 or 8), C % block
// == 0; elements of `element_size` bytes.
void launch_reorder_blocked(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, int64_t block,
                            int element_size, bool to_blocked);
// (N, C, H, W) plain <-> NHWC: per sample, the (C, HW) matrix transposed (to_nhwc) or back;
// elements of `element_size` (1, 2, 4 or 8) bytes.
void launch_reorder_nhwc(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, int element_size, bool to_nhwc);

}  // namespace packrat::cuda
