// concat, split, narrow, expand: copies that move data between tensors of different shapes.
// None saves anything: each backward is the other's forward (concat <-> split, narrow <-> pad
// with zeros, expand <-> sum over the stretched dims).
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat::ops {

namespace {

int64_t normalize_dim(const std::string& where, int64_t dim, int64_t rank) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  PACKRAT_CHECK(d >= 0 && d < rank, "{}: dim {} is out of range for a {}-d input", where, dim, rank);
  return d;
}

Shape with_dim(const Shape& s, int64_t dim, int64_t size) {
  std::vector<int64_t> dims = s.dims();
  dims[dim] = size;
  return Shape(dims);
}

// Splits g along dim into parts of `sizes`, each back in its own layout.
std::vector<Tensor> split_grad(const Tensor& g, int64_t dim, const std::vector<int64_t>& sizes,
                               const std::vector<Layout>& layouts) {
  std::vector<Tensor> out;
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(backend_of(g).narrow(g, dim, start, sizes[i]).to_layout(layouts[i]));
    start += sizes[i];
  }
  return out;
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t dim_in) {
  const std::string where = op_where("concat");
  PACKRAT_CHECK(!xs.empty(), "{}: no inputs", where);
  for (const Tensor& t : xs) PACKRAT_CHECK(t.defined(), "{}: an input is undefined", where);
  const int64_t dim = normalize_dim(where, dim_in, xs[0].rank());
  std::vector<int64_t> sizes;
  std::vector<Layout> layouts;
  std::vector<const Tensor*> inputs;
  // f32 and 16-bit inputs (autocast: a ViT's f32 class token before its bf16 patches) meet in
  // the promoted dtype, as PyTorch's cat promotes them; other dtypes must agree.
  bool mixed = false;
  for (const Tensor& t : xs)
    mixed = mixed || (t.dtype() != xs[0].dtype() && is_f32_or_half(t.dtype()) && is_f32_or_half(xs[0].dtype()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    PACKRAT_CHECK(t.rank() == xs[0].rank() && (t.dtype() == xs[0].dtype() || mixed) && t.device() == xs[0].device(),
                  "{}: input {} is {} {} on {}, input 0 is {} {} on {}", where, i, t.shape().str(),
                  dtype_name(t.dtype()), t.device().str(), xs[0].shape().str(), dtype_name(xs[0].dtype()),
                  xs[0].device().str());
    for (int64_t d = 0; d < t.rank(); ++d)
      PACKRAT_CHECK(d == dim || t.dim(d) == xs[0].dim(d), "{}: input {} has shape {}, input 0 {}: they differ in dim {}",
                    where, i, t.shape().str(), xs[0].shape().str(), d);
    sizes.push_back(t.dim(dim));
    layouts.push_back(t.layout());
    inputs.push_back(&t);
  }
  Tensor y;
  if (mixed) {
    const DType common = DType::f32;  // a mix of f32 and 16-bit, or of bf16 and f16: promoted to f32
    std::vector<Tensor> same;
    for (const Tensor& t : xs) same.push_back(t.to(common));
    y = backend_of(xs[0]).concat(same, dim);
  } else {
    y = backend_of(xs[0]).concat(xs, dim);
  }
  bool grad = false;
  for (const Tensor* t : inputs) grad = grad || needs_grad({t});
  if (grad) {
    record("concat", inputs, {&y}, {}, [dim, sizes, layouts](Node&, const std::vector<Tensor>& g) {
      return split_grad(g[0], dim, sizes, layouts);
    });
  }
  return y;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  const std::string where = op_where("split");
  PACKRAT_CHECK(x.defined(), "{}: the input is undefined", where);
  const int64_t dim = normalize_dim(where, dim_in, x.rank());
  int64_t total = 0;
  for (int64_t s : sizes) {
    PACKRAT_CHECK(s >= 0, "{}: negative part size {}", where, s);
    total += s;
  }
  PACKRAT_CHECK(total == x.dim(dim), "{}: parts of sizes ({}) sum to {}, but dim {} of {} has {}", where,
                fmt::join(sizes, ", "), total, dim, x.shape().str(), x.dim(dim));
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(backend_of(x).narrow(x, dim, start, s));
    start += s;
  }
  if (needs_grad({&x})) {
    std::vector<Tensor*> outs;
    for (Tensor& p : parts) outs.push_back(&p);
    const Shape x_shape = x.shape();
    const Layout x_layout = x.layout();
    record("split", {&x}, outs, {}, [dim, sizes, x_shape, x_layout](Node&, const std::vector<Tensor>& g) {
      std::vector<Tensor> full;  // (..., sizes[i], ...) each; an unused part contributes zeros
      Device device = Device::cpu();
      for (const Tensor& gi : g)
        if (gi.defined()) device = gi.device();
      DeviceScope on(device);
      for (size_t i = 0; i < g.size(); ++i)
        full.push_back(g[i].defined() ? g[i] : Tensor::zeros(with_dim(x_shape, dim, sizes[i])));
      return std::vector<Tensor>{backend_of(full[0]).concat(full, dim).to_layout(x_layout)};
    });
  }
  return parts;
}

Tensor narrow(const Tensor& x, int64_t dim_in, int64_t start, int64_t length) {
  const std::string where = op_where("narrow");
  PACKRAT_CHECK(x.defined(), "{}: the input is undefined", where);
  const int64_t dim = normalize_dim(where, dim_in, x.rank());
  PACKRAT_CHECK(start >= 0 && length >= 0 && start + length <= x.dim(dim),
                "{}: [{}, {}) is out of range for dim {} of {}", where, start, start + length, dim, x.shape().str());
  Tensor y = backend_of(x).narrow(x, dim, start, length);
  if (needs_grad({&x})) {
    const Shape x_shape = x.shape();
    const Layout x_layout = x.layout();
    record("narrow", {&x}, {&y}, {}, [dim, start, length, x_shape, x_layout](Node&, const std::vector<Tensor>& g) {
      // g padded with zeros before and after the slice: (..., x_shape[dim], ...)
      DeviceScope on(g[0].device());
      const std::vector<Tensor> parts{Tensor::zeros(with_dim(x_shape, dim, start)), g[0],
                                      Tensor::zeros(with_dim(x_shape, dim, x_shape[dim] - start - length))};
      return std::vector<Tensor>{backend_of(g[0]).concat(parts, dim).to_layout(x_layout)};
    });
  }
  return y;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  const std::string where = op_where("expand");
  PACKRAT_CHECK(x.defined(), "{}: the input is undefined", where);
  PACKRAT_CHECK(x.dtype() == DType::f32, "{}: expects f32, got {}", where, dtype_name(x.dtype()));
  PACKRAT_CHECK(shape.rank() >= x.rank(), "{}: cannot expand {} to fewer dims {}", where, x.shape().str(), shape.str());
  for (int64_t i = 1; i <= x.rank(); ++i) {
    const int64_t a = x.dim(-i), b = shape[shape.rank() - i];
    PACKRAT_CHECK(a == b || a == 1, "{}: cannot expand {} to {}", where, x.shape().str(), shape.str());
  }
  // The broadcasting add writes x stretched to `shape` (0 + x is exact).
  const DeviceScope on(x.device());
  const Tensor zeros = Tensor::zeros(shape);  // (shape), a transient
  Tensor y = backend_of(x).binary(BinaryOp::Add, zeros, x);
  if (needs_grad({&x})) {
    const Shape x_shape = x.shape();
    const Layout x_layout = x.layout();
    record("expand", {&x}, {&y}, {}, [x_shape, x_layout](Node&, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{backend_of(g[0]).reduce_sum_to(g[0], x_shape).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
