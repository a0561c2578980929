#pragma once
// Launchers of the embedding kernels (embedding_kernels.cu). CUDA-free and fmt-free; the caller
// (cuda_backend_embedding.cpp) checks the launch afterwards (PACKRAT_CHECK_LAUNCH).
#include <cstddef>
#include <cstdint>

namespace packrat::cuda {

// weight (num, D), ids (count) -> y (count, D); bad (1) must hold kNoBadIndex beforehand and holds
// the first position with an id outside [0, num) afterwards.
void launch_embedding_forward(const float* weight, const int64_t* ids, float* y, unsigned long long* bad,
                              int64_t count, int64_t num, int64_t D);
// Bytes of device scratch launch_embedding_backward needs for `count` ids below `num`.
size_t embedding_backward_scratch_bytes(int64_t count, int64_t num);
// dweight (num, D) = zeros, then dweight[ids[i]] += grad[i] (deterministic: ids sorted stably, each
// row summed in position order); grad (count, D), scratch of embedding_backward_scratch_bytes.
void launch_embedding_backward(const float* grad, const int64_t* ids, float* dweight, void* scratch,
                               int64_t count, int64_t num, int64_t D);

}  // namespace packrat::cuda
