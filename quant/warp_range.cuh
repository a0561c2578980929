#pragma once
// The range (min, max) of a run of floats, one warp at a time, equal to the CPU's plain scan
// (quant/mixed_quant_device.h's bucket_range_ref, group_quant.h's quantize_group) whatever the
// order of combination. Included by .cu files only (per-group and mixed bucket quantization).
#include <cuda_runtime.h>

#include <cstdint>

#include "quant/group_quant_warp.h"  // keep_min, keep_max

namespace packrat::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

// min and max of x[0..len), len >= 1, by the whole warp (every lane calls it; every lane gets
// the result): each lane scans a stride, then the lanes combine.
__device__ inline void warp_range(const float* x, int64_t len, int lane, float& mn_out, float& mx_out) {
  float mn = x[0], mx = x[0];
  int64_t imn = 0, imx = 0;
  for (int64_t i = 1 + lane; i < len; i += 32) {
    keep_min(mn, imn, x[i], i);
    keep_max(mx, imx, x[i], i);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    keep_min(mn, imn, __shfl_xor_sync(kFullWarp, mn, offset), __shfl_xor_sync(kFullWarp, imn, offset));
    keep_max(mx, imx, __shfl_xor_sync(kFullWarp, mx, offset), __shfl_xor_sync(kFullWarp, imx, offset));
  }
  mn_out = mn;
  mx_out = mx;
}

}  // namespace packrat::cuda
