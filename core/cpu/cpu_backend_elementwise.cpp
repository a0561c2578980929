// CpuBackend: binary elementwise ops (same shape over the buffers as they lie, or numpy
// broadcasting), scale, in-place accumulate and reductions.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

// fn(functor) with the functor of op: one instantiation of each loop per op, so that the
// compiler vectorises each as the single-op loop it is.
template <typename Fn>
void with_op(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add: fn([](auto x, auto y) { return x + y; }); break;
    case BinaryOp::Sub: fn([](auto x, auto y) { return x - y; }); break;
    case BinaryOp::Mul: fn([](auto x, auto y) { return x * y; }); break;
    case BinaryOp::Div: fn([](auto x, auto y) { return x / y; }); break;
  }
}

// fn(T*) with T the element type of an f32 or f64 tensor.
template <typename Fn>
void with_float_type(DType d, Fn&& fn) {
  if (d == DType::f64) fn(static_cast<double*>(nullptr));
  else fn(static_cast<float*>(nullptr));
}

// out[i] = f(a[i], b[i]) over equal-layout buffers of n elements.
Tensor binary_same_shape(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty_like(a);
  const int64_t n = a.numel();
  with_float_type(a.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* __restrict x = a.data<T>();
    const T* __restrict y = b.data<T>();
    T* __restrict o = out.data<T>();
    with_op(op, [&](auto f) {
      parallel_chunks(n, kBinaryGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
      });
    });
  });
  return out;
}

// Dims of a broadcast, right-aligned, with each operand's element stride (0 where it is
// stretched); adjacent dims that are contiguous for all operands are merged, so that
// (N, C, 1, 1) x (N, C, H, W) runs as (N C, 1) x (N C, H W).
struct Broadcast {
  std::vector<int64_t> size;             // out dims, outermost first
  std::vector<std::vector<int64_t>> stride;  // per operand
};

Broadcast broadcast_dims(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& operands) {
  const size_t r = out.size();
  Broadcast b;
  b.stride.resize(operands.size());
  std::vector<std::vector<int64_t>> full(operands.size(), std::vector<int64_t>(r, 0));
  for (size_t k = 0; k < operands.size(); ++k) {
    const auto& dims = operands[k];
    int64_t st = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      const size_t d = dims.size() - 1 - i, o = r - 1 - i;
      full[k][o] = dims[d] == 1 ? 0 : st;
      st *= dims[d];
    }
  }
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;  // contributes nothing
    bool merge = !b.size.empty();
    for (size_t k = 0; k < operands.size() && merge; ++k)
      merge = b.stride[k].back() == full[k][i] * out[i];
    if (merge) {
      b.size.back() *= out[i];
      for (size_t k = 0; k < operands.size(); ++k) b.stride[k].back() = full[k][i];
    } else {
      b.size.push_back(out[i]);
      for (size_t k = 0; k < operands.size(); ++k) b.stride[k].push_back(full[k][i]);
    }
  }
  if (b.size.empty()) {  // every dim 1: one element
    b.size.push_back(1);
    for (auto& s : b.stride) s.push_back(0);
  }
  return b;
}

// Offsets of row `row` (every dim but the last, row-major) in each operand.
void row_offsets(const Broadcast& b, int64_t row, int64_t* off) {
  const size_t r = b.size.size();
  for (size_t k = 0; k < b.stride.size(); ++k) off[k] = 0;
  for (size_t d = r - 1; d-- > 0;) {
    const int64_t i = row % b.size[d];
    row /= b.size[d];
    for (size_t k = 0; k < b.stride.size(); ++k) off[k] += i * b.stride[k][d];
  }
}

Tensor binary_broadcast(BinaryOp op, const Tensor& a_any, const Tensor& b_any) {
  const Tensor a = a_any.to_plain(), b = b_any.to_plain();
  const auto& da = a.shape().dims();
  const auto& db = b.shape().dims();
  const size_t r = std::max(da.size(), db.size());
  std::vector<int64_t> out_dims(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i < da.size() ? da[da.size() - 1 - i] : 1, y = i < db.size() ? db[db.size() - 1 - i] : 1;
    PACKRAT_CHECK(x == y || x == 1 || y == 1, "{}: shapes {} and {} do not broadcast", op_where(binary_name(op)),
                  a.shape().str(), b.shape().str());
    out_dims[r - 1 - i] = x == 1 ? y : x;
  }
  Tensor out = empty_cpu(Shape(out_dims), a.dtype());  // broadcast shape, plain
  const Broadcast bc = broadcast_dims(out_dims, {out_dims, da, db});
  const int64_t inner = bc.size.back(), rows = inner == 0 ? 0 : out.numel() / inner;
  const int64_t sa = bc.stride[1].back(), sb = bc.stride[2].back();
  with_float_type(a.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    with_op(op, [&](auto f) {
      rows_for(rows, inner, [&](int64_t row) {
        int64_t off[3];
        row_offsets(bc, row, off);
        const T* xr = x + off[1];
        const T* yr = y + off[2];
        T* orow = o + off[0];
        for (int64_t j = 0; j < inner; ++j) orow[j] = f(xr[j * sa], yr[j * sb]);
      });
    });
  });
  return out;
}

}  // namespace

Tensor CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  PACKRAT_CHECK(a.dtype() == b.dtype(), "{}: operand dtypes {} and {} differ", op_where(name), dtype_name(a.dtype()),
                dtype_name(b.dtype()));
  PACKRAT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, "{}: expects f32 or f64 operands, got {}",
                op_where(name), dtype_name(a.dtype()));
  if (a.shape() == b.shape()) return binary_same_shape(op, a, b.to_layout(a.layout()));
  return binary_broadcast(op, a, b);
}

Tensor CpuBackend::scale(const Tensor& a, double s) {
  PACKRAT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, "{}: expects f32 or f64, got {}",
                op_where("scale"), dtype_name(a.dtype()));
  Tensor out = Tensor::empty_like(a);
  const int64_t n = a.numel();
  if (a.dtype() == DType::f64) {
    const double* x = a.data<double>();
    double* o = out.data<double>();
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * s;
  } else {
    const float* __restrict x = a.data<float>();
    float* __restrict o = out.data<float>();
    const float sf = static_cast<float>(s);
    parallel_chunks(n, kBinaryGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = x[i] * sf;
    });
  }
  return out;
}

void CpuBackend::accumulate(Tensor& dst, const Tensor& src_any) {
  PACKRAT_CHECK(dst.shape() == src_any.shape() && dst.dtype() == src_any.dtype() &&
                    (dst.dtype() == DType::f32 || dst.dtype() == DType::f64),
                "{}: cannot add {} into {}", op_where("accumulate"), src_any.describe(), dst.describe());
  const Tensor src = src_any.to_layout(dst.layout());
  const int64_t n = dst.numel();
  with_float_type(dst.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* __restrict d = dst.data<T>();
    const T* __restrict s = src.data<T>();
    parallel_chunks(n, kBinaryGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] += s[i];
    });
  });
  dst.bump_version();
}

double CpuBackend::reduce_sum(const Tensor& x) {
  x.check_dtype(DType::f32, "reduce_sum");
  const float* d = x.data<float>();
  const int64_t n = x.numel();
  double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= kMinParallelWork)
  for (int64_t k = 0; k < n; ++k) s += d[k];
  return s;
}

double CpuBackend::reduce_sum_squares(const Tensor& x) {
  x.check_dtype(DType::f32, "reduce_sum_squares");
  const float* d = x.data<float>();
  const int64_t n = x.numel();
  double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= kMinParallelWork)
  for (int64_t k = 0; k < n; ++k) s += static_cast<double>(d[k]) * d[k];
  return s;
}

Tensor CpuBackend::reduce_sum_to(const Tensor& x_any, const Shape& shape) {
  PACKRAT_CHECK(x_any.dtype() == DType::f32 || x_any.dtype() == DType::f64, "{}: expects f32 or f64, got {}",
                op_where("reduce_sum_to"), dtype_name(x_any.dtype()));
  const Tensor x = x_any.to_plain();
  const auto& dx = x.shape().dims();
  const auto& ds = shape.dims();
  bool ok = ds.size() <= dx.size();
  for (size_t i = 0; ok && i < ds.size(); ++i) {
    const int64_t s = ds[ds.size() - 1 - i], d = dx[dx.size() - 1 - i];
    ok = s == d || s == 1;
  }
  PACKRAT_CHECK(ok, "{}: {} does not broadcast from {}", op_where("reduce_sum_to"), x.shape().str(), shape.str());
  std::vector<double> acc(static_cast<size_t>(shape.numel()), 0.0);  // (shape), double
  const Broadcast bc = broadcast_dims(dx, {dx, ds});
  const int64_t inner = bc.size.back(), rows = inner == 0 ? 0 : x.numel() / inner;
  const int64_t so = bc.stride[1].back();
  Tensor out = empty_cpu(shape, x.dtype());  // (shape), plain
  with_float_type(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xp = x.data<T>();
    for (int64_t row = 0; row < rows; ++row) {
      int64_t off[2];
      row_offsets(bc, row, off);
      const T* xr = xp + off[0];
      double* ar = acc.data() + off[1];
      for (int64_t j = 0; j < inner; ++j) ar[j * so] += xr[j];
    }
    T* o = out.data<T>();
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<T>(acc[i]);
  });
  return out;
}

}  // namespace packrat::cpu
