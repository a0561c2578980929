// CudaBackend: matmul on cuBLAS (cublasSgemmStridedBatched, f32 math without TF32) and the bias
// gradient's column sums (matmul_kernels.h).
#include <climits>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_check.h"
#include "core/cuda/dnn_handles.h"
#include "core/cuda/matmul_kernels.h"

namespace packrat::cuda {

Tensor CudaBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M,
                           int64_t K, int64_t N, const Tensor& bias, const Shape& out) {
  const std::string what = fmt::format("matmul on {}: batch {}, ({}, {}){} @ ({}, {}){}", device().str(), batch, M, K,
                                       trans_a ? " read transposed" : "", K, N, trans_b ? " read transposed" : "");
  PACKRAT_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.layout() == Layout::Plain &&
                    b.layout() == Layout::Plain && a.numel() == batch * M * K && b.numel() == batch * K * N,
                "{}: operands {} and {} do not hold that (plain f32)", what, a.describe(), b.describe());
  PACKRAT_CHECK(out.numel() == batch * M * N, "{}: output shape {} does not hold ({}, {}, {})", what, out.str(), batch,
                M, N);
  PACKRAT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.numel() == N), "{}: bias {} is not ({}) f32",
                what, bias.defined() ? bias.describe() : "", N);
  PACKRAT_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && batch <= INT_MAX,
                "{}: a dimension does not fit cuBLAS's int", what);
  Tensor c = Tensor::empty(out, DType::f32, Layout::Plain, TagScope::current(), device());  // (batch, M, N) as `out`
  if (c.numel() == 0) return c;
  if (bias.defined()) {
    launch_broadcast_rows(c.device_data<float>(), bias.device_data<float>(), batch * M, N);
    PACKRAT_CHECK_LAUNCH("matmul (bias)");
  } else if (K == 0) {
    fill(c, 0.0);
  }
  if (K == 0) return c;
  // Row-major C (M, N) is column-major C^T (N, M) = op(B)^T op(A)^T: cuBLAS reads each row-major
  // buffer as its column-major transpose, so the operands swap and each keeps its own flag.
  // a: (M, K) row-major = column-major (K, M), ld K; transposed storage (K, M) = column-major (M, K), ld M.
  // b: (K, N) row-major = column-major (N, K), ld N; transposed storage (N, K) = column-major (K, N), ld K.
  const float alpha = 1.0f, beta = bias.defined() ? 1.0f : 0.0f;
  PACKRAT_CUBLAS_CHECK(
      cublasSgemmStridedBatched(cublas_handle(index_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                static_cast<int>(K), &alpha, b.device_data<float>(), static_cast<int>(trans_b ? K : N),
                                K * N, a.device_data<float>(), static_cast<int>(trans_a ? M : K), M * K, &beta,
                                c.device_data<float>(), static_cast<int>(N), M * N, static_cast<int>(batch)),
      what);
  return c;
}

Tensor CudaBackend::column_sums(const Tensor& m, int64_t M, int64_t N) {
  PACKRAT_CHECK(m.dtype() == DType::f32 && m.layout() == Layout::Plain && m.numel() == M * N,
                "column_sums on {}: {} is not a plain ({}, {}) f32 matrix", device().str(), m.describe(), M, N);
  Tensor s = Tensor::empty(Shape{N}, DType::f32, Layout::Plain, TagScope::current(), device());  // (N)
  if (N == 0) return s;
  if (M == 0) {
    fill(s, 0.0);
    return s;
  }
  const int64_t parts = column_parts(M, N);
  const Tensor partial =
      Tensor::empty(Shape{parts, N}, DType::f64, Layout::Plain, MemTag::Workspace, device());  // (parts, N)
  launch_column_sums(m.device_data<float>(), M, N, partial.device_data<double>(), parts, s.device_data<float>());
  PACKRAT_CHECK_LAUNCH("column_sums");
  return s;
}

}  // namespace packrat::cuda
