#pragma once
// packrat's row-major batched matmul as cuBLAS's column-major GEMM. CUDA-free, so the mapping is
// tested on the host (tests/core/cuda_kernels_dnn_test.cpp runs a column-major GEMM with these
// arguments against the CPU backend's matmul).
//
// Row-major C (M, N) is column-major C^T (N, M) = op(B)^T op(A)^T, and cuBLAS reads a row-major
// (r, c) buffer as the column-major (c, r) matrix, its transpose, with leading dimension c. So the
// operands swap places and each keeps its own transpose flag:
//   b (K, N) row-major = column-major (N, K) = B^T, ld N;  stored transposed (N, K): ld K, op T.
//   a (M, K) row-major = column-major (K, M) = A^T, ld K;  stored transposed (K, M): ld M, op T.
#include <cstdint>

namespace packrat::cuda {

struct GemmArgs {
  bool transpose_first, transpose_second;  // cuBLAS's transa / transb: the first operand is b, the second a
  int64_t m, n, k;                         // cuBLAS's m, n, k: N, M, K
  int64_t ld_first, ld_second, ld_out;     // ldb, lda, ldc
  int64_t stride_first, stride_second, stride_out;  // per batch: K N, M K, M N
};

inline GemmArgs gemm_args(bool trans_a, bool trans_b, int64_t M, int64_t K, int64_t N) {
  return GemmArgs{trans_b, trans_a, N, M, K, trans_b ? K : N, trans_a ? M : K, N, K * N, M * K, M * N};
}

}  // namespace packrat::cuda
