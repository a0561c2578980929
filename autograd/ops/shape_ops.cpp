// reshape, flatten, transpose_last2. reshape/flatten are views of plain data (a blocked input
// is reordered to plain first); transpose_last2 is a copy. None saves anything for backward.
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"

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
  Tensor y = backend_of(x).transpose_last2(x);
  if (needs_grad({&x})) {
    const Layout x_layout = x.layout();
    record("transpose_last2", {&x}, {&y}, {}, [x_layout](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {backend_of(g[0]).transpose_last2(g[0]).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
