// CpuBackend: binary elementwise ops on f32, f64 or two bf16 operands (same shape over the buffers
// as they lie, a blocked or NHWC tensor against a per-channel or per-sample one in its layout, or
// numpy broadcasting),
// scale, in-place accumulate and reductions.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/broadcast.h"
#include "core/cpu/bf16_simd.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/parallel.h"

namespace packrat::cpu {

namespace {

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

// loop(f) with f the functor of op taking (x's value, v's value): op's own where x is its first
// operand, else op's with its operands swapped (v op x), so that one loop serves both orders.
template <typename Loop>
void with_op_x_first(BinaryOp op, bool x_first, Loop&& loop) {
  with_op(op, [&](auto f) {
    if (x_first) loop(f);
    else loop([f](auto p, auto q) { return f(q, p); });
  });
}

// fn(T*) with T the element type of an f32 or f64 tensor.
template <typename Fn>
void with_float_type(DType d, Fn&& fn) {
  if (d == DType::f64) fn(static_cast<double*>(nullptr));
  else fn(static_cast<float*>(nullptr));
}

// The same for a binary op's operands, which may also be bf16 (binary_reads).
template <typename Fn>
void with_operand_type(DType d, Fn&& fn) {
  if (d == DType::bf16) fn(static_cast<bf16_t*>(nullptr));
  else with_float_type(d, fn);
}

// An operand's value as the op computes with it (bf16: its f32 value), and a result stored as T
// (bf16: rounded to nearest even, as in_dtype rounds the f32 result).
template <typename T>
inline auto widened(T v) {
  if constexpr (std::is_same_v<T, bf16_t>) return to_f32(v);
  else return v;
}
template <typename T, typename V>
inline T narrowed(V v) {
  if constexpr (std::is_same_v<T, bf16_t>) return from_f32<bf16_t>(v);
  else return v;
}

// bf16 operands are computed with on SIMD lanes, widened and rounded back (core/cpu/bf16_simd.h):
// the scalar rounding's NaN branch kept the element loop off them, and squeeze-and-excitation's
// per-channel products took twice f32's time. f is with_op's, which GCC's vector types also take.
#if defined(__AVX512F__)
constexpr int64_t kBf16Lanes = 16;
inline __m512 load_widened(const bf16_t* p) { return simd::load_bf16x16(p); }
inline void store_narrowed(bf16_t* p, __m512 v) { simd::store_bf16x16(p, v); }
#elif defined(__AVX2__)
constexpr int64_t kBf16Lanes = 8;
inline __m256 load_widened(const bf16_t* p) { return simd::load_bf16x8(p); }
inline void store_narrowed(bf16_t* p, __m256 v) { simd::store_bf16x8(p, v); }
#else
constexpr int64_t kBf16Lanes = 1;
inline float load_widened(const bf16_t* p) { return to_f32(*p); }
inline void store_narrowed(bf16_t* p, float v) { *p = from_f32<bf16_t>(v); }
#endif

// o[i] = f(x[i], y[i]), i < n, for bf16 buffers.
template <typename F>
void bf16_binary_run(F f, const bf16_t* x, const bf16_t* y, bf16_t* o, int64_t n) {
  int64_t i = 0;
  for (; i + kBf16Lanes <= n; i += kBf16Lanes) store_narrowed(o + i, f(load_widened(x + i), load_widened(y + i)));
  for (; i < n; ++i) o[i] = from_f32<bf16_t>(f(to_f32(x[i]), to_f32(y[i])));
}

// out[i] = f(a[i], b[i]) over equal-layout buffers of n elements.
Tensor binary_same_shape(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty_like(a);
  const int64_t n = a.numel();
  with_operand_type(a.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* __restrict x = a.data<T>();
    const T* __restrict y = b.data<T>();
    T* __restrict o = out.data<T>();
    with_op(op, [&](auto f) {
      parallel_chunks(n, kBinaryGrain, [&](int64_t s, int64_t e) {
        if constexpr (std::is_same_v<T, bf16_t>) bf16_binary_run(f, x + s, y + s, o + s, e - s);
        else
          for (int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
      });
    });
  });
  return out;
}

// Whether x (blocked or NHWC, f32 or bf16) meets v as squeeze-and-excitation's per-channel scale
// does: v of shape (N or 1, C, 1, 1) against x's (N, C, H, W).
bool per_channel_of_blocked(const Tensor& x, const Tensor& v) {
  return (channel_block(x.layout()) || x.layout() == Layout::NHWC) && x.dtype() != DType::f64 && x.rank() == 4 && v.rank() == 4 &&
         v.dim(1) == x.dim(1) && v.dim(2) == 1 && v.dim(3) == 1 && (v.dim(0) == x.dim(0) || v.dim(0) == 1);
}

// f(x, v) (x_first) or f(v, x) with x blocked and v per channel (per_channel_of_blocked), in x's
// layout: reading x as it lies spares a reorder of x into plain and of the result back. NHWC is
// walked as one block of all C channels.
Tensor blocked_by_channel(BinaryOp op, const Tensor& x, const Tensor& v_any, bool x_first) {
  const int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
  const int64_t B = x.layout() == Layout::NHWC ? C : channel_block(x.layout()), CB = C / B;
  const Tensor v = v_any.to_plain();                          // (N or 1, C, 1, 1), x's dtype
  Tensor out = empty_cpu(x.shape(), x.dtype(), x.layout());  // (N, C, H, W), x's layout
  const int64_t v_sample = v.dim(0) == 1 ? 0 : C;  // values from one sample's channels to the next's
  with_operand_type(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xs = x.data<T>();
    const T* vs = v.data<T>();
    T* os = out.data<T>();
    auto loop = [&](auto f) {
      rows_for(N * CB, HW * B, [&](int64_t nb) {
        const T* vb = vs + (nb / CB) * v_sample + (nb % CB) * B;  // (B,) this block's channels
        const T* xb = xs + nb * HW * B;                           // (HW, B)
        T* ob = os + nb * HW * B;
        if constexpr (std::is_same_v<T, bf16_t>) {
          if (B == kBf16Lanes) {  // a block's channels are one vector's lanes
            const auto v = load_widened(vb);
            for (int64_t s = 0; s < HW; ++s) store_narrowed(ob + s * B, f(load_widened(xb + s * B), v));
            return;
          }
        }
        for (int64_t s = 0; s < HW; ++s)
          for (int64_t l = 0; l < B; ++l) ob[s * B + l] = narrowed<T>(f(widened(xb[s * B + l]), widened(vb[l])));
      });
    };
    with_op_x_first(op, x_first, loop);
  });
  return out;
}

// Whether v holds one value per sample of a 4-d x in any layout: v (N, 1, 1, 1) against x's
// (N, C, H, W), as drop path's noise meets its input.
bool per_sample_of(const Tensor& x, const Tensor& v) {
  return x.rank() == 4 && v.rank() == 4 && x.dim(0) == v.dim(0) && v.numel() == v.dim(0) && x.layout() != Layout::Plain;
}

// f(x, v[n]) (x_first) or f(v[n], x) over each sample n of x, in x's layout: every layout keeps a
// sample's values together, so a blocked or NHWC x is neither reordered into plain nor back.
Tensor by_sample(BinaryOp op, const Tensor& x, const Tensor& v_any, bool x_first) {
  const Tensor v = v_any.to_plain();                          // (N, 1, 1, 1), x's dtype
  Tensor out = empty_cpu(x.shape(), x.dtype(), x.layout());  // (N, C, H, W), x's layout
  const int64_t N = x.dim(0), per_sample = x.numel() / std::max<int64_t>(N, 1);
  with_operand_type(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xs = x.data<T>();
    const T* vs = v.data<T>();
    T* os = out.data<T>();
    auto loop = [&](auto f) {
      rows_for(N, per_sample, [&](int64_t n) {
        const auto s = widened(vs[n]);
        const T* xr = xs + n * per_sample;
        T* orow = os + n * per_sample;
        for (int64_t j = 0; j < per_sample; ++j) orow[j] = narrowed<T>(f(widened(xr[j]), s));
      });
    };
    with_op_x_first(op, x_first, loop);
  });
  return out;
}

Tensor binary_broadcast(BinaryOp op, const Tensor& a_any, const Tensor& b_any) {
  if (per_channel_of_blocked(a_any, b_any)) return blocked_by_channel(op, a_any, b_any, true);
  if (per_channel_of_blocked(b_any, a_any)) return blocked_by_channel(op, b_any, a_any, false);
  if (per_sample_of(a_any, b_any)) return by_sample(op, a_any, b_any, true);
  if (per_sample_of(b_any, a_any)) return by_sample(op, b_any, a_any, false);
  const Tensor a = a_any.to_plain(), b = b_any.to_plain();
  const auto& da = a.shape().dims();
  const auto& db = b.shape().dims();
  const std::vector<int64_t> out_dims = broadcast_shape(op_where(binary_op_name(op)), a.shape(), b.shape());
  Tensor out = empty_cpu(Shape(out_dims), a.dtype());  // broadcast shape, plain
  const Broadcast bc = broadcast_dims(out_dims, {out_dims, da, db});
  const int64_t inner = bc.size.back(), rows = inner == 0 ? 0 : out.numel() / inner;
  const int64_t sa = bc.stride[1].back(), sb = bc.stride[2].back();
  with_operand_type(a.dtype(), [&](auto* tag) {
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
        for (int64_t j = 0; j < inner; ++j) orow[j] = narrowed<T>(f(widened(xr[j * sa]), widened(yr[j * sb])));
      });
    });
  });
  return out;
}

}  // namespace

Tensor CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  PACKRAT_CHECK(a.dtype() == b.dtype(), "{}: operand dtypes {} and {} differ", op_where(name), dtype_name(a.dtype()),
                dtype_name(b.dtype()));
  PACKRAT_CHECK(binary_reads(a.dtype()), "{}: expects f32, f64 or bf16 operands, got {}", op_where(name),
                dtype_name(a.dtype()));
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
  check_broadcasts_to(op_where("reduce_sum_to"), x.shape(), shape);
  std::vector<double> acc(static_cast<size_t>(shape.numel()), 0.0);  // (shape), double
  const Broadcast bc = broadcast_dims(dx, {dx, ds});
  const int64_t inner = bc.size.back(), rows = inner == 0 ? 0 : x.numel() / inner;
  const int64_t so = bc.stride[1].back();
  Tensor out = empty_cpu(shape, x.dtype());  // (shape), plain
  with_float_type(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* xp = x.data<T>();
    if (so == 0) {
      // Each row sums to one element (the SE squeeze's (N, C, H, W) -> (N, C, 1, 1), a bias's
      // gradient): rows in parallel, 8 independent double sums a row so that the adds pipeline
      // instead of waiting on one another, then added to their outputs in row order (the same
      // result on any number of threads).
      std::vector<double> row_sum(static_cast<size_t>(rows));  // (rows,)
      rows_for(rows, inner, [&](int64_t row) {
        int64_t off[2];
        row_offsets(bc, row, off);
        const T* xr = xp + off[0];
        double lanes[8] = {};
        int64_t j = 0;
        for (; j + 8 <= inner; j += 8)
          for (int k = 0; k < 8; ++k) lanes[k] += static_cast<double>(xr[j + k]);
        for (; j < inner; ++j) lanes[0] += static_cast<double>(xr[j]);
        row_sum[static_cast<size_t>(row)] =
            ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      });
      for (int64_t row = 0; row < rows; ++row) {
        int64_t off[2];
        row_offsets(bc, row, off);
        acc[static_cast<size_t>(off[1])] += row_sum[static_cast<size_t>(row)];
      }
    } else {
      for (int64_t row = 0; row < rows; ++row) {
        int64_t off[2];
        row_offsets(bc, row, off);
        const T* xr = xp + off[0];
        double* ar = acc.data() + off[1];
        for (int64_t j = 0; j < inner; ++j) ar[j * so] += xr[j];
      }
    }
    T* o = out.data<T>();
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<T>(acc[i]);
  });
  return out;
}

namespace {
// out[n][c] = sum over the (H, W) plane of g * a, in double: g f32, a f32 or bf16, both laid out
// as `layout` (plain, NHWC or channel-blocked); out (N, C) plain f32. One thread a sample, each sum
// in one order: the same result on any number of threads.
template <typename TA>
void plane_sums_of_product(const float* g, const TA* a, Layout layout, int64_t N, int64_t C, int64_t HW, float* out) {
  const int64_t B = channel_block(layout);
  rows_for(N, C * HW, [&](int64_t n) {
    const float* gn = g + n * C * HW;
    const TA* an = a + n * C * HW;
    float* on = out + n * C;
    if (layout == Layout::Plain) {
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0.0;
        for (int64_t i = 0; i < HW; ++i) sum += static_cast<double>(gn[c * HW + i]) * to_f32(an[c * HW + i]);
        on[c] = static_cast<float>(sum);
      }
      return;
    }
    // NHWC: one run of HW pixels of C channels; blocked: C / B runs of HW pixels of B channels.
    // Each run's channels summed lane by lane, pixel after pixel.
    const int64_t width = layout == Layout::NHWC ? C : B, runs = layout == Layout::NHWC ? 1 : C / B;
    std::vector<double> sums(static_cast<size_t>(width));  // (width,) this run's channels
    alignas(64) float wide[64];                          // (<= 64,) a piece of a 16-bit run widened
    for (int64_t r = 0; r < runs; ++r) {
      std::fill(sums.begin(), sums.end(), 0.0);
      const float* gr = gn + r * HW * width;
      const TA* ar = an + r * HW * width;
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t c0 = 0; c0 < width; c0 += 64) {
          const int64_t m = std::min<int64_t>(64, width - c0);
          const float* ap = simd::f32_values(ar + i * width + c0, m, wide);  // the operand's values as f32
          const float* gp = gr + i * width + c0;
          double* sp = sums.data() + c0;
#pragma omp simd
          for (int64_t c = 0; c < m; ++c) sp[c] += static_cast<double>(gp[c] * ap[c]);
        }
      for (int64_t c = 0; c < width; ++c) on[r * width + c] = static_cast<float>(sums[static_cast<size_t>(c)]);
    }
  });
}
}  // namespace

Tensor CpuBackend::reduce_sum_of_product_to(const Tensor& g, const Tensor& a, const Shape& shape) {
  // The plane sums (N, C, H, W) -> (N, C, 1, 1) of an f32 gradient and an f32 or bf16 operand in one
  // layout, without the product's tensor, its plain copy or a 16-bit operand's f32 copy.
  const bool planes = g.rank() == 4 && shape.rank() == 4 && shape[0] == g.dim(0) && shape[1] == g.dim(1) &&
                      shape[2] == 1 && shape[3] == 1;
  if (!planes || g.shape() != a.shape() || g.layout() != a.layout() || g.dtype() != DType::f32 ||
      (a.dtype() != DType::f32 && a.dtype() != DType::bf16))
    return Backend::reduce_sum_of_product_to(g, a, shape);
  Tensor out = empty_cpu(shape);  // (N, C, 1, 1) plain
  const int64_t HW = g.dim(2) * g.dim(3);
  with_f32_or_bf16_data(a, "reduce_sum_of_product_to", [&](const auto* ap) {
    plane_sums_of_product(g.data<float>(), ap, g.layout(), g.dim(0), g.dim(1), HW, out.data<float>());
  });
  return out;
}

}  // namespace packrat::cpu
