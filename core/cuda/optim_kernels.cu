// The CUDA optimizer section's kernels: one grid-stride pass of the bodies of kernels/optim.h.
#include "core/cuda/optim_kernels.h"

#include "core/cuda/kernels/optim.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

void launch_sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float weight_decay, float momentum,
                       float damp, bool nesterov, bool first) {
  if (!buf) return launch_for_each(n, SgdBody{p, g, lr, weight_decay});
  launch_for_each(n, SgdMomentumBody{p, g, buf, lr, weight_decay, momentum, damp, nesterov, first});
}

namespace {
__global__ void sgd_many_kernel(SgdManyBody body) { body.block(blockIdx.x, threadIdx.x, blockDim.x); }
}  // namespace

void launch_sgd_update_many(const SgdTensor* tensors, int count, float lr, float weight_decay, float momentum,
                            float damp, bool nesterov) {
  SgdManyBody body{{}, lr, weight_decay, momentum, damp, nesterov};
  for (int done = 0; done < count;) {
    done += fill_sgd_table(body.table, tensors + done, count - done);
    const int64_t blocks = body.table.first_block[body.table.count];
    if (blocks > 0) sgd_many_kernel<<<static_cast<unsigned>(blocks), 256>>>(body);
  }
}

void launch_adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1, float beta2,
                         float step_size, float bc2_sqrt, float eps) {
  launch_for_each(n, AdamWBody{p, g, m, v, decay, beta1, beta2, step_size, bc2_sqrt, eps});
}

}  // namespace packrat::cuda
