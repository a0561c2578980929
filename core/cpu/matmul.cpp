#include "core/cpu/matmul.h"

#include <vector>

#include "core/cpu/dnnl_context.h"
#include "core/cpu/loops.h"
#include "core/parallel.h"

namespace packrat::cpu {

using dnnl::memory;

namespace {
// (batch, rows, cols) over a row-major buffer holding (batch, rows, cols), or its transpose.
memory::desc view(int64_t batch, int64_t rows, int64_t cols, bool transposed, DType dtype) {
  const memory::dims dims{batch, rows, cols};
  const memory::dims strides = transposed ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1};
  return memory::desc(dims, dnnl_type(dtype), strides);
}
}  // namespace

Tensor matmul(const Tensor& a_in, bool trans_a, const Tensor& b_in, bool trans_b, int64_t batch, int64_t M, int64_t K,
              int64_t N, const Tensor& bias, const Shape& out, DType c_dtype) {
  // A 16-bit operand beside an f32 one (a weight): the f32 one is read converted.
  const DType ab = is_half(a_in.dtype()) ? a_in.dtype() : b_in.dtype();
  const Tensor a = a_in.to(ab), b = b_in.to(ab);
  if (K == 0) return zeros_cpu(out, c_dtype);
  Tensor c = empty_cpu(out, c_dtype);  // (batch, M, N) as `out`
  if (c.numel() == 0) return c;
  const memory::desc ad = view(batch, M, K, trans_a, ab), bd = view(batch, K, N, trans_b, ab),
                     cd = view(batch, M, N, false, c_dtype);
  const memory::desc biasd = bias.defined() ? memory::desc({1, 1, N}, memory::data_type::f32, memory::dims{N, N, 1})
                                            : memory::desc();
  const dnnl::matmul::desc d = bias.defined() ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd);
  const dnnl::matmul::primitive_desc pd(d, dnnl_attr(), dnnl_engine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(a, ad)},
                                       {DNNL_ARG_WEIGHTS, memory_of(b, bd)},
                                       {DNNL_ARG_DST, memory_of(c, cd)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, memory_of(bias, biasd));
  execute(dnnl::matmul(pd), pd, std::move(args));
  return c;
}

Tensor column_sums(const Tensor& m, int64_t M, int64_t N) {
  Tensor s = empty_cpu(Shape{N});  // (N)
  const float* src = m.data<float>();
  float* dst = s.data<float>();
  parallel_chunks(N, 16, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(e - b), 0.0);
    for (int64_t i = 0; i < M; ++i) {
      const float* row = src + i * N;
      for (int64_t j = b; j < e; ++j) acc[static_cast<size_t>(j - b)] += row[j];
    }
    for (int64_t j = b; j < e; ++j) dst[j] = static_cast<float>(acc[static_cast<size_t>(j - b)]);
  });
  return s;
}

}  // namespace packrat::cpu
