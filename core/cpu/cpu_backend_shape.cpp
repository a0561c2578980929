// CpuBackend: shape primitives: the batched last-two-dims transpose and the option-A
// shortcut's channel pad + spatial subsample (blocked where the input is).
#include <algorithm>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"

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
    case 4: transpose_batched(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), B, M, N); break;
    case 8: transpose_batched(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), B, M, N); break;
    default: fail("transpose_last2: unsupported dtype {}", dtype_name(x.dtype()));
  }
  return y;
}

Tensor CpuBackend::pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) {
  const ShortcutGeometry g = shortcut_geometry(x.shape(), out_channels, stride);
  const int64_t block = channel_block(x.layout());
  const Layout out_layout = block && out_channels % block == 0 ? x.layout() : Layout::Plain;
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

}  // namespace packrat::cpu
