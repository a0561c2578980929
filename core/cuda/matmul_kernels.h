#pragma once
// Launchers of the matmul section's own kernels (matmul_kernels.cu): the bias broadcast before
// cuBLAS and the column sums. CUDA-free and fmt-free.
#include <cstdint>

namespace packrat::cuda {

// c (rows, N) = bias (N) in every row.
void launch_broadcast_rows(float* c, const float* bias, int64_t rows, int64_t N);

// Row parts per column for launch_column_sums: about 64K threads in all, each summing at least
// 64 rows.
inline int64_t column_parts(int64_t M, int64_t N) {
  const int64_t want = (65536 + N - 1) / (N > 0 ? N : 1), most = M / 64;
  const int64_t parts = want < most ? want : most;
  return parts < 1 ? 1 : parts;
}
// out (N) = column sums of m (M, N) in double; partial (parts, N) doubles of scratch.
void launch_column_sums(const float* m, int64_t M, int64_t N, double* partial, int64_t parts, float* out);

}  // namespace packrat::cuda
