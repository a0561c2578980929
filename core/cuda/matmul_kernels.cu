// The matmul section's own kernels (bodies in core/cuda/kernels/bias.h).
#include "core/cuda/kernels/bias.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/matmul_kernels.h"

namespace packrat::cuda {

void launch_broadcast_rows(float* c, const float* bias, int64_t rows, int64_t N) {
  launch_for_each(rows * N, BroadcastRow{c, bias, N});
}

void launch_column_sums(const float* m, int64_t M, int64_t N, double* partial, int64_t parts, float* out) {
  launch_for_each(parts * N, ColumnPartialSums{m, partial, M, N, parts});
  launch_for_each(N, ColumnSumsFinalize{partial, out, N, parts});
}

}  // namespace packrat::cuda
