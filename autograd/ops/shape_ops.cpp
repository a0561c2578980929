// reshape, flatten, transpose_last2. reshape/flatten are views of plain data (a blocked input
// is reordered to plain first); transpose_last2 is a copy. None saves anything for backward.
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "autograd/ops/eltwise_common.h"
#include "core/parallel.h"

namespace packrat::ops {

namespace {

// A view of x with another shape, recorded as `op`; the gradient goes back to x's shape and layout.
Tensor reshape_as_op(const char* op, const Tensor& x, const Shape& shape) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "{} {}: the input is undefined", op, layer);
  for (int64_t d : shape.dims())
    PACKRAT_CHECK(d >= 0, "{} {}: negative dimension in target shape {}", op, layer, shape.str());
  PACKRAT_CHECK(shape.numel() == x.numel(), "{} {}: cannot view {} ({} elements) as {} ({} elements)", op, layer,
                x.shape().str(), x.numel(), shape.str(), shape.numel());
  Tensor y = x.reshape(shape);
  if (needs_grad({&x})) {
    const Shape x_shape = x.shape();
    const Layout x_layout = x.layout();
    record(op, {&x}, {&y}, {}, [x_shape, x_layout](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {g[0].reshape(x_shape).to_layout(x_layout)};
    });
  }
  return y;
}

// (B, M, N) plain -> (B, N, M), tiled so that both sides stay in cache.
template <typename T>
void transpose_batched(const T* src, T* dst, int64_t B, int64_t M, int64_t N) {
  constexpr int64_t kTile = 32;
  const int64_t tiles_m = (M + kTile - 1) / kTile;
  detail::rows_for(B * tiles_m, kTile * N, [&](int64_t bt) {
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

Tensor transpose_copy(const Tensor& x_any) {
  Tensor x = x_any.to_plain();
  std::vector<int64_t> dims = x.shape().dims();
  const int64_t M = dims[dims.size() - 2], N = dims[dims.size() - 1];
  const int64_t B = M * N == 0 ? 0 : x.numel() / (M * N);
  std::swap(dims[dims.size() - 2], dims[dims.size() - 1]);
  Tensor y = Tensor::empty(Shape(dims), x.dtype());
  switch (dtype_size(x.dtype())) {
    case 1: transpose_batched(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), B, M, N); break;
    case 4: transpose_batched(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), B, M, N); break;
    case 8: transpose_batched(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), B, M, N); break;
    default: fail("transpose_last2: unsupported dtype {}", dtype_name(x.dtype()));
  }
  return y;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) { return reshape_as_op("reshape", x, shape); }

Tensor flatten(const Tensor& x, int64_t start_dim) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "flatten {}: the input is undefined", layer);
  const int64_t r = x.rank();
  const int64_t sd = start_dim < 0 ? start_dim + r : start_dim;
  PACKRAT_CHECK(sd >= 0 && sd < std::max<int64_t>(r, 1), "flatten {}: start_dim {} is out of range for a {}-d input {}",
                layer, start_dim, r, x.shape().str());
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().begin() + sd);
  int64_t rest = 1;
  for (int64_t i = sd; i < r; ++i) rest *= x.dim(i);
  dims.push_back(rest);
  return reshape_as_op("flatten", x, Shape(dims));
}

Tensor transpose_last2(const Tensor& x) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "transpose_last2 {}: the input is undefined", layer);
  PACKRAT_CHECK(x.rank() >= 2, "transpose_last2 {}: needs at least 2 dimensions, got {}", layer, x.shape().str());
  Tensor y = transpose_copy(x);
  if (needs_grad({&x})) {
    const Layout x_layout = x.layout();
    record("transpose_last2", {&x}, {&y}, {}, [x_layout](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {transpose_copy(g[0]).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
