// The CUDA random section's kernels: grid-stride bodies of kernels/random.h (the Philox words and
// their mapping to elements: core/philox.h and core/philox_maps.h, shared with the CPU).
#include "core/cuda/random_kernels.h"

#include "core/cuda/kernels/random.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

void launch_dropout(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                    uint64_t stream) {
  launch_for_each(DropoutPhilox::counters(n), DropoutBody{x, y, mask, n, p, scale, seed, stream});
}

void launch_mask_scale(const float* grad, const uint8_t* mask, float* out, int64_t n, float scale) {
  launch_for_each(n, MaskScaleBody{grad, mask, out, scale});
}

void launch_fill_uniform(float* t, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) {
  launch_for_each(fill_blocks_for(n), FillBody<false>{t, n, lo, hi, seed, stream, counter});
}

void launch_fill_normal(float* t, int64_t n, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) {
  launch_for_each(fill_blocks_for(n), FillBody<true>{t, n, mean, std, seed, stream, counter});
}

}  // namespace packrat::cuda
