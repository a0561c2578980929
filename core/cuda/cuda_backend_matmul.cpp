// CudaBackend: matmul on cuBLAS (cublasSgemmStridedBatched, f32 math without TF32; the row-major
// to column-major mapping in gemm_args.h) and the bias gradient's column sums (matmul_kernels.h).
#include <climits>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_check.h"
#include "core/cuda/dnn_handles.h"
#include "core/cuda/gemm_args.h"
#include "core/cuda/matmul_kernels.h"

namespace packrat::cuda {

Tensor CudaBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M,
                           int64_t K, int64_t N, const Tensor& bias, const Shape& out, DType c_dtype) {
  make_current(index_);
  // The context of every error below, formatted only on failure.
  const auto what = [&] {
    return fmt::format("matmul on {}: batch {}, ({}, {}){} @ ({}, {}){}", device().str(), batch, M, K,
                       trans_a ? " read transposed" : "", K, N, trans_b ? " read transposed" : "");
  };
  PACKRAT_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.layout() == Layout::Plain &&
                    b.layout() == Layout::Plain && a.numel() == batch * M * K && b.numel() == batch * K * N,
                "{}: operands {} and {} do not hold that (plain f32)", what(), a.describe(), b.describe());
  PACKRAT_CHECK(c_dtype == DType::f32, "{}: this backend computes matmuls in f32 only, not {}", what(),
                dtype_name(c_dtype));
  PACKRAT_CHECK(out.numel() == batch * M * N, "{}: output shape {} does not hold ({}, {}, {})", what(), out.str(), batch,
                M, N);
  PACKRAT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.numel() == N), "{}: bias {} is not ({}) f32",
                what(), bias.defined() ? bias.describe() : "", N);
  PACKRAT_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && batch <= INT_MAX,
                "{}: a dimension does not fit cuBLAS's int", what());
  Tensor c = Tensor::empty(out, DType::f32, Layout::Plain, TagScope::current(), device());  // (batch, M, N) as `out`
  if (c.numel() == 0) return c;
  if (bias.defined()) {
    launch_broadcast_rows(c.device_data<float>(), bias.device_data<float>(), batch * M, N);
    PACKRAT_CHECK_LAUNCH("matmul (bias)");
  } else if (K == 0) {
    fill(c, 0.0);
  }
  if (K == 0) return c;
  const GemmArgs g = gemm_args(trans_a, trans_b, M, K, N);
  const float alpha = 1.0f, beta = bias.defined() ? 1.0f : 0.0f;  // beta 1: onto the broadcast bias
  PACKRAT_CUBLAS_CHECK(
      cublasSgemmStridedBatched(cublas_handle(index_), g.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                                g.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m),
                                static_cast<int>(g.n), static_cast<int>(g.k), &alpha, b.device_data<float>(),
                                static_cast<int>(g.ld_first), g.stride_first, a.device_data<float>(),
                                static_cast<int>(g.ld_second), g.stride_second, &beta, c.device_data<float>(),
                                static_cast<int>(g.ld_out), g.stride_out, static_cast<int>(batch)),
      what());
  return c;
}

Tensor CudaBackend::column_sums(const Tensor& m, int64_t M, int64_t N) {
  make_current(index_);
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
