#pragma once
// The range (min, max) of a run of floats, one warp at a time, equal to the CPU's plain scan
// (quant/mixed_quant_device.h's bucket_range_ref, group_quant.h's quantize_group) whatever the
// order of combination. Included by .cu files only (per-group and mixed bucket quantization).
#include <cuda_runtime.h>

#include <cstdint>

#include "quant/group_quant_warp.h"  // RangeScan, first_zero_in

namespace packrat::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

// min and max of x[0..len), len >= 1, by the whole warp (every lane calls it; every lane gets
// the result): each lane scans a stride by value (RangeScan), the lanes combine, and a range
// ending in a zero takes the sign of the run's first zero, found by the lanes (first_zero_in).
__device__ inline void warp_range(const float* x, int64_t len, int lane, float& mn_out, float& mx_out) {
  RangeScan range(x[0]);
  for (int64_t i = lane; i < len; i += 32) range.keep(x + i, 1);
  for (int offset = 16; offset > 0; offset /= 2) {
    RangeScan o = range;
    o.mn = __shfl_xor_sync(kFullWarp, range.mn, offset);
    o.mx = __shfl_xor_sync(kFullWarp, range.mx, offset);
    range.merge(o);
  }
  if (range.ends_in_zero()) {  // the same on every lane
    uint64_t zero = kNoZero;
    for (int64_t i = lane; i < len && zero == kNoZero; i += 32) zero = first_zero_in(x + i, 1, i);
    for (int offset = 16; offset > 0; offset /= 2) {
      const uint64_t z = __shfl_xor_sync(kFullWarp, zero, offset);
      zero = z < zero ? z : zero;
    }
    range.settle_zero(zero);
  }
  range.finish();
  mn_out = range.mn;
  mx_out = range.mx;
}

}  // namespace packrat::cuda
