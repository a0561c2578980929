// CpuBackend: the Transformer's shape primitives: general permute, concat / narrow along one
// dim (byte copies of contiguous runs), and the causal attention mask.
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/shape_split.h"

namespace packrat::cpu {

namespace {

// y = permute(x): each output row (the last output dim) is gathered with one source stride.
template <typename T>
void permute_copy(const T* src, T* dst, const std::vector<int64_t>& out_dims, const std::vector<int64_t>& src_stride) {
  const int64_t r = static_cast<int64_t>(out_dims.size());
  const int64_t last = out_dims.back(), last_stride = src_stride.back();
  const int64_t rows = last == 0 ? 0 : [&] {
    int64_t n = 1;
    for (int64_t d : out_dims) n *= d;
    return n / last;
  }();
  rows_for(rows, last, [&](int64_t row) {
    int64_t rem = row, off = 0;
    for (int64_t k = r - 2; k >= 0; --k) {  // row -> (i_0, ..., i_{r-2}) -> source offset
      off += (rem % out_dims[k]) * src_stride[k];
      rem /= out_dims[k];
    }
    T* d = dst + row * last;
    for (int64_t i = 0; i < last; ++i) d[i] = src[off + i * last_stride];
  });
}

}  // namespace

Tensor CpuBackend::permute(const Tensor& x_any, std::span<const int64_t> perm) {
  const Tensor x = x_any.to_plain();
  const int64_t r = x.rank();
  PACKRAT_CHECK(static_cast<int64_t>(perm.size()) == r, "permute: {} axes for a {}-d tensor", perm.size(), r);
  std::vector<int64_t> in_stride(r, 1);
  for (int64_t k = r - 2; k >= 0; --k) in_stride[k] = in_stride[k + 1] * x.dim(k + 1);
  std::vector<int64_t> out_dims(r), src_stride(r);
  for (int64_t k = 0; k < r; ++k) {
    out_dims[k] = x.dim(perm[k]);
    src_stride[k] = in_stride[perm[k]];
  }
  Tensor y = empty_cpu(Shape(out_dims), x.dtype());
  if (r == 0 || y.numel() == 0) {
    if (y.numel() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return y;
  }
  switch (dtype_size(x.dtype())) {
    case 1: permute_copy(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), out_dims, src_stride); break;
    case 4: permute_copy(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), out_dims, src_stride); break;
    case 8: permute_copy(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), out_dims, src_stride); break;
    default: fail("permute: unsupported dtype {}", dtype_name(x.dtype()));
  }
  return y;
}

Tensor CpuBackend::concat(std::span<const Tensor> xs_any, int64_t dim) {
  PACKRAT_CHECK(!xs_any.empty(), "concat: no inputs");
  std::vector<Tensor> xs;
  for (const Tensor& t : xs_any) xs.push_back(t.to_plain());
  std::vector<int64_t> dims = xs[0].shape().dims();
  dims[dim] = 0;
  for (const Tensor& t : xs) dims[dim] += t.dim(dim);
  Tensor y = empty_cpu(Shape(dims), xs[0].dtype());  // (..., sum of d_dim, ...)
  const int64_t outer = outer_of(y.shape(), dim), esize = dtype_size(y.dtype());
  const int64_t out_run = dims[dim] * inner_of(y.shape(), dim) * esize;  // bytes per outer index in y
  auto* dst = static_cast<uint8_t*>(y.raw());
  int64_t offset = 0;  // bytes into each output run
  for (const Tensor& t : xs) {
    const int64_t run = t.dim(dim) * inner_of(t.shape(), dim) * esize;
    const auto* src = static_cast<const uint8_t*>(t.raw());
    rows_for(outer, run / esize, [&](int64_t o) { std::memcpy(dst + o * out_run + offset, src + o * run, run); });
    offset += run;
  }
  return y;
}

Tensor CpuBackend::narrow(const Tensor& x_any, int64_t dim, int64_t start, int64_t length) {
  const Tensor x = x_any.to_plain();
  std::vector<int64_t> dims = x.shape().dims();
  dims[dim] = length;
  Tensor y = empty_cpu(Shape(dims), x.dtype());  // (..., length, ...)
  const int64_t outer = outer_of(x.shape(), dim), inner = inner_of(x.shape(), dim), esize = dtype_size(x.dtype());
  const int64_t in_run = x.dim(dim) * inner * esize, out_run = length * inner * esize;
  const auto* src = static_cast<const uint8_t*>(x.raw()) + start * inner * esize;
  auto* dst = static_cast<uint8_t*>(y.raw());
  rows_for(outer, out_run / esize, [&](int64_t o) { std::memcpy(dst + o * out_run, src + o * in_run, out_run); });
  return y;
}

void CpuBackend::causal_mask_fill(Tensor& scores) {
  PACKRAT_CHECK(scores.dtype() == DType::f32 && scores.layout() == Layout::Plain && scores.rank() >= 2,
                "causal_mask_fill: expects plain f32 scores (..., T, S), got {}", scores.shape().str());
  const int64_t T = scores.dim(-2), S = scores.dim(-1);
  PACKRAT_CHECK(T <= S, "causal_mask_fill: {} queries for {} keys", T, S);
  const int64_t rows = T == 0 ? 0 : scores.numel() / S;
  float* p = scores.data<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  rows_for(rows, S, [&](int64_t row) {
    const int64_t i = row % T;
    float* r = p + row * S;
    for (int64_t j = i + (S - T) + 1; j < S; ++j) r[j] = kNegInf;
  });
}

}  // namespace packrat::cpu
