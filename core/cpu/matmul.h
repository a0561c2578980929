#pragma once
// oneDNN matmul on plain packrat tensors: batched C = op(A) @ op(B) (+ bias), where op() is an
// optional transpose read through strides (no copy).
#include <cstdint>

#include "core/tensor.h"

namespace packrat::cpu {

// a holds (batch, M, K) row-major, or (batch, K, M) when trans_a; b holds (batch, K, N), or
// (batch, N, K) when trans_b. bias (N) or undefined. Returns c (batch, M, N) plain, shaped `out`.
Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M, int64_t K,
              int64_t N, const Tensor& bias, const Shape& out, DType c_dtype);

// (N,) column sums of a plain (M, N) f32 matrix, accumulated in double.
Tensor column_sums(const Tensor& m, int64_t M, int64_t N);

}  // namespace packrat::cpu
