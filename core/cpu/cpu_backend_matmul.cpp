// CpuBackend: matmul on oneDNN and the bias gradient's column sums (core/cpu/matmul.h).
#include "core/cpu/cpu_backend.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/matmul.h"

namespace packrat::cpu {

Tensor CpuBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M,
                          int64_t K, int64_t N, const Tensor& bias, const Shape& out, DType c_dtype) {
  return cpu::matmul(a, trans_a, b, trans_b, batch, M, K, N, bias, out, c_dtype);
}

bool CpuBackend::computes_in(DType dtype) const {
  return dtype == DType::f32 || (dtype == DType::bf16 && bf16_kernels());
}

Tensor CpuBackend::column_sums(const Tensor& m, int64_t M, int64_t N) { return cpu::column_sums(m, M, N); }

}  // namespace packrat::cpu
