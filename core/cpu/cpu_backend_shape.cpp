// CpuBackend: shape primitives: the batched last-two-dims transpose, the option-A shortcut's
// channel pad + spatial subsample (blocked where the input is), and the Transformer's: general
// permute, concat / narrow along one dim (byte copies of contiguous runs), the causal attention mask.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/attention_math.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"
#include "core/shape_split.h"

namespace packrat::cpu {

namespace {

// (B, M, N) plain -> (B, N, M), tiled so that both sides stay in cache.
template <typename T>
void transpose_batched(const T* src, T* dst, int64_t B, int64_t M, int64_t N) {
  constexpr int64_t kTile = 32;
  const int64_t tiles_m = (M + kTile - 1) / kTile;
  rows_for(B * tiles_m, kTile * N, [&](int64_t bt) {
    const int64_t b = bt / tiles_m, m0 = (bt % tiles_m) * kTile, m1 = std::min(M, m0 + kTile);
    const T* s = src + b * M * N;
    T* d = dst + b * M * N;
    for (int64_t n0 = 0; n0 < N; n0 += kTile) {
      const int64_t n1 = std::min(N, n0 + kTile);
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = n0; n < n1; ++n) d[n * M + m] = s[m * N + n];
    }
  });
}

struct ShortcutGeometry {
  int64_t N, Cin, H, W, Cout, Ho, Wo, stride, front;
};

ShortcutGeometry shortcut_geometry(const Shape& x, int64_t out_channels, int64_t stride) {
  return {x[0], x[1], x[2], x[3], out_channels, (x[2] + stride - 1) / stride, (x[3] + stride - 1) / stride, stride,
          (out_channels - x[1]) / 2};
}

// to_out: dst[n, c + front, ho, wo] = src[n, c, ho*s, wo*s] (forward), else the reverse
// (backward), for c in [0, Cin).
template <bool to_out>
void shortcut_copy(const ShortcutGeometry& g, const Tensor& src, Tensor& dst) {
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const Layout ls = src.layout(), ld = dst.layout();
  rows_for(g.N * g.Cin, g.Ho * g.Wo, [&](int64_t nc) {
    const int64_t n = nc / g.Cin, c = nc % g.Cin;
    for (int64_t ho = 0; ho < g.Ho; ++ho)
      for (int64_t wo = 0; wo < g.Wo; ++wo) {
        const int64_t in = nchw_offset(to_out ? ls : ld, g.Cin, g.H, g.W, n, c, ho * g.stride, wo * g.stride);
        const int64_t out = nchw_offset(to_out ? ld : ls, g.Cout, g.Ho, g.Wo, n, c + g.front, ho, wo);
        if constexpr (to_out) d[out] = s[in];
        else d[in] = s[out];
      }
  });
}

}  // namespace

Tensor CpuBackend::transpose_last2(const Tensor& x_any) {
  const Tensor x = x_any.to_plain();
  std::vector<int64_t> dims = x.shape().dims();
  const int64_t M = dims[dims.size() - 2], N = dims[dims.size() - 1];
  const int64_t B = M * N == 0 ? 0 : x.numel() / (M * N);
  std::swap(dims[dims.size() - 2], dims[dims.size() - 1]);
  Tensor y = empty_cpu(Shape(dims), x.dtype());  // (..., N, M)
  switch (dtype_size(x.dtype())) {
    case 1: transpose_batched(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), B, M, N); break;
    case 2: transpose_batched(static_cast<const uint16_t*>(x.raw()), static_cast<uint16_t*>(y.raw()), B, M, N); break;
    case 4: transpose_batched(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), B, M, N); break;
    case 8: transpose_batched(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), B, M, N); break;
    default: fail("transpose_last2: unsupported dtype {}", dtype_name(x.dtype()));
  }
  return y;
}

Tensor CpuBackend::pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) {
  const ShortcutGeometry g = shortcut_geometry(x.shape(), out_channels, stride);
  const int64_t block = channel_block(x.layout());
  const bool keeps_layout = x.layout() == Layout::NHWC || (block && out_channels % block == 0);
  const Layout out_layout = keeps_layout ? x.layout() : Layout::Plain;
  Tensor y = empty_cpu({g.N, g.Cout, g.Ho, g.Wo}, DType::f32, out_layout);  // (N, Cout, Ho, Wo)
  fill(y, 0.0);
  shortcut_copy<true>(g, x, y);
  return y;
}

Tensor CpuBackend::pad_channels_subsample_backward(const Tensor& grad, const Shape& x_shape, Layout x_layout,
                                                   int64_t stride) {
  const ShortcutGeometry g = shortcut_geometry(x_shape, grad.dim(1), stride);
  Tensor gx = empty_cpu(x_shape, DType::f32, x_layout);  // (N, Cin, H, W)
  fill(gx, 0.0);
  shortcut_copy<false>(g, grad, gx);
  return gx;
}

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
    case 2: permute_copy(static_cast<const uint16_t*>(x.raw()), static_cast<uint16_t*>(y.raw()), out_dims, src_stride); break;
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

void CpuBackend::key_padding_fill(Tensor& scores, const Tensor& key_lengths) {
  const int64_t rows_per_sample = check_key_padding(scores, key_lengths), S = scores.dim(-1);
  const int64_t rows = S == 0 ? 0 : scores.numel() / S;
  const int64_t* len = key_lengths.data<int64_t>();
  float* p = scores.data<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  rows_for(rows, S, [&](int64_t row) {
    float* r = p + row * S;
    for (int64_t j = attention_math::clamp_length(len[row / rows_per_sample], S); j < S; ++j) r[j] = kNegInf;
  });
}

Tensor CpuBackend::sequence_lengths(const Tensor& tokens, int64_t pad) {
  PACKRAT_CHECK(tokens.dtype() == DType::i64 && tokens.rank() == 2,
                "sequence_lengths: expects tokens (N, T) i64, got {}", tokens.describe());
  const int64_t N = tokens.dim(0), T = tokens.dim(1);
  Tensor lengths = empty_cpu(Shape{N}, DType::i64);  // (N)
  const int64_t* t = tokens.data<int64_t>();
  int64_t* out = lengths.data<int64_t>();
  for (int64_t n = 0; n < N; ++n) {
    int64_t end = 0;
    while (end < T && t[n * T + end] != pad) ++end;
    out[n] = std::max<int64_t>(end, 1);
  }
  return lengths;
}

}  // namespace packrat::cpu
