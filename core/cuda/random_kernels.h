#pragma once
// Launchers of the CUDA random section (random_kernels.cu): dropout from Philox, masked scaling,
// Philox fills. CUDA- and fmt-free, so that the g++-compiled CudaBackend calls them; the caller
// checks the launch.
#include <cstdint>

namespace packrat::cuda {

// y = keep ? x * scale : 0, mask (u8, may be null) = keep, over n elements.
void launch_dropout(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                    uint64_t stream);
// out = mask ? grad * scale : 0.
void launch_mask_scale(const float* grad, const uint8_t* mask, float* out, int64_t n, float scale);
// t (n floats) from the Philox blocks counter, counter + 1, ...: uniform in [lo, hi) / normal(mean, std).
void launch_fill_uniform(float* t, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter);
void launch_fill_normal(float* t, int64_t n, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter);

}  // namespace packrat::cuda
