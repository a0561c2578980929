// The memory-efficient attention's kernels: a warp per row (kernels/attention.h).
#include <algorithm>
#include <cstdint>

#include "core/cuda/attention_kernels.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/row_launch.cuh"

namespace packrat::cuda {

namespace {

// row(r, lane, 32, WarpReducer) for every r in [0, rows): always a warp per row (the bodies keep
// a row's head dimension in its lanes' registers), whatever the row's length.
template <class Row>
void launch_warp_rows(int64_t rows, const Row& row) {
  if (rows <= 0) return;
  constexpr int64_t kWarpsPerBlock = kThreadsPerBlock / 32;
  const int64_t blocks = std::min((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, int64_t{1} << 20);
  rows_by_warp_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(rows, row);
}

}  // namespace

void launch_attention_forward(const AttentionGeometry& a, int64_t G, float* y, float* lse) {
  launch_warp_rows(G * a.T, AttentionForwardRow{a, y, lse});
}

void launch_attention_backward(const AttentionGeometry& a, int64_t G, const float* y, const float* lse,
                               const float* dy, float* d, float* dq, float* dk, float* dv) {
  launch_warp_rows(G * a.T, AttentionBackwardQueryRow{a, y, lse, dy, d, dq});
  if (dk || dv) launch_warp_rows(G * a.S, AttentionBackwardKeyRow{a, lse, dy, d, dk, dv});
}

void launch_key_padding_fill(float* scores, const int64_t* lengths, int64_t B, int64_t rows_per_sample, int64_t S) {
  launch_for_each(B * rows_per_sample * S, KeyPaddingFill{scores, lengths, rows_per_sample, S});
}

void launch_sequence_lengths(const int64_t* tokens, int64_t* lengths, int64_t N, int64_t T, int64_t pad) {
  launch_for_each(N, SequenceLengths{tokens, lengths, T, pad});
}

}  // namespace packrat::cuda
