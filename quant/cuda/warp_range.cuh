#pragma once
// The range (min, max) of a bucket, one warp at a time, equal to the CPU's plain scan
// (quant/mixed/mixed_quant_device.h's bucket_range_ref) whatever the order of combination. Included
// by .cu files only (the mixed bucket quantizer).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/launch.cuh"        // kFullWarp
#include "quant/group/group_quant_warp.h"  // RangeScan, first_zero_in, block8_len

namespace packrat::cuda {

// min and max of x[0..len), len >= 1, by the whole warp (every lane calls it; every lane gets
// the result). Lane l takes blocks of 8 l, l + 32, ... (the per-group kernel's schedule with a
// warp a group), the first K of them already in registers (v[i], n[i] values: block l + 32 i),
// the others read from x: each lane scans its values (RangeScan), the lanes combine, and a range
// ending in a zero takes the sign of the bucket's first zero, found by the lanes (first_zero_in).
template <int K>
__device__ inline void warp_range(const float* x, int64_t len, int lane, const float (&v)[K][8], const int (&n)[K],
                                  float& mn_out, float& mx_out) {
  RangeScan range(x[0]);
#pragma unroll
  for (int i = 0; i < K; ++i) range.keep(v[i], n[i]);
  for (int64_t b = lane + 32 * K; 8 * b < len; b += 32) {  // buckets over 256 K values only
    float w[8];
    const int m = block8_len(len, b);
    load_floats8(x + 8 * b, m, w);
    range.keep(w, m);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    RangeScan o = range;
    o.mn = __shfl_xor_sync(kFullWarp, range.mn, offset);
    o.mx = __shfl_xor_sync(kFullWarp, range.mx, offset);
    range.merge(o);
  }
  if (range.ends_in_zero()) {  // the same on every lane
    uint64_t zero = kNoZero;
    for (int64_t b = lane; 8 * b < len; b += 32) {
      float w[8];
      const int m = block8_len(len, b);
      load_floats8(x + 8 * b, m, w);
      const uint64_t z = first_zero_in(w, m, 8 * b);
      zero = z < zero ? z : zero;
    }
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
