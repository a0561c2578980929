#pragma once
// Launchers of the CUDA optimizer section (optim_kernels.cu): fused SGD and AdamW updates over
// f32 buffers of n elements, in place. CUDA- and fmt-free; the caller checks the launch.
#include <cstdint>

#include "core/cuda/kernels/optim.h"  // SgdTensor

namespace packrat::cuda {

// buf null: p -= lr (g + wd p); else the momentum step of core/optim_math.h (damp = 1 - dampening).
void launch_sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float weight_decay, float momentum,
                       float damp, bool nesterov, bool first);
// The same step over tensors[0, count), each with its own buffer (or none) and `first`: one launch
// per kSgdTableTensors tensors.
void launch_sgd_update_many(const SgdTensor* tensors, int count, float lr, float weight_decay, float momentum,
                            float damp, bool nesterov);
void launch_adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1, float beta2,
                         float step_size, float bc2_sqrt, float eps);

}  // namespace packrat::cuda
