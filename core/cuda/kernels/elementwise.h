#pragma once
// Per-index bodies and per-thread helpers of the CUDA elementwise section: binary ops (same shape
// and broadcast), scale, accumulate, and the shares of the reductions. PACKRAT_HD and CUDA-free,
// so that the host tests run them (tests/core/cuda_kernels_elementwise_test.cpp).
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernels/float_io.h"
#include "core/hd.h"

namespace packrat::cuda {

// Merged dims beyond this are an error (core/broadcast.h merges contiguous dims, so only tensors
// of more than 8 dims can need more).
constexpr int kMaxKernelDims = 8;

struct AddOp {
  template <typename T>
  PACKRAT_HD static T apply(T x, T y) { return x + y; }
};
struct SubOp {
  template <typename T>
  PACKRAT_HD static T apply(T x, T y) { return x - y; }
};
struct MulOp {
  template <typename T>
  PACKRAT_HD static T apply(T x, T y) { return x * y; }
};
struct DivOp {
  template <typename T>
  PACKRAT_HD static T apply(T x, T y) { return x / y; }
};

// out = a op b over equal buffers of n elements, quad q (core/cuda/kernels/float_io.h; f32 as
// float4 where aligned).
template <typename T, class Op>
struct BinarySameShapeBody {
  const T* a;
  const T* b;
  T* out;
  int64_t n;
  PACKRAT_HD void operator()(int64_t q) const {
    const int m = quad_len(q, n);
    if constexpr (std::is_same_v<T, float>) {
      float x[4] = {}, y[4] = {};
      load_floats4(a + 4 * q, m, x);
      load_floats4(b + 4 * q, m, y);
      for (int k = 0; k < 4; ++k) x[k] = Op::apply(x[k], y[k]);  // past m: computed, not stored
      store_floats4(x, m, out + 4 * q);
    } else {
      for (int k = 0; k < m; ++k) out[4 * q + k] = Op::apply(a[4 * q + k], b[4 * q + k]);
    }
  }
};

// The offset of flat index i, row-major over `size` (rank dims, outermost first), in a buffer of
// element strides `stride`; the outermost dim needs no modulo. `narrow`: every index and size
// fits in 32 bits (the tensor has fewer than 2^32 elements), so the divisions run in 32 bits, a
// few times faster on a GPU than 64-bit ones (which dominate a broadcast's cost otherwise).
PACKRAT_HD inline int64_t strided_offset(int64_t i, int rank, const int64_t* size, const int64_t* stride,
                                         bool narrow) {
  if (rank == 0) return 0;
  int64_t off = 0;
  if (narrow) {
    auto j = static_cast<uint32_t>(i);
    for (int d = rank - 1; d > 0; --d) {
      const auto n = static_cast<uint32_t>(size[d]);
      const uint32_t q = j / n;
      off += static_cast<int64_t>(j - q * n) * stride[d];
      j = q;
    }
    return off + static_cast<int64_t>(j) * stride[0];
  }
  for (int d = rank - 1; d > 0; --d) {
    off += (i % size[d]) * stride[d];
    i /= size[d];
  }
  return off + i * stride[0];
}

// Whether a tensor of `numel` elements can take strided_offset's 32-bit path.
PACKRAT_HD inline bool narrow_indices(int64_t numel) { return numel < (int64_t{1} << 32); }

// A broadcast's merged dims (core/broadcast.h's broadcast_dims), outermost first; out is plain
// over them, a and b read with their strides (0 along a stretched dim).
struct BroadcastGeometry {
  int rank = 0;
  bool narrow = false;  // fewer than 2^32 elements (strided_offset)
  int64_t size[kMaxKernelDims] = {};
  int64_t stride_a[kMaxKernelDims] = {};
  int64_t stride_b[kMaxKernelDims] = {};
};

// out[i] = a[..] op b[..] with numpy broadcasting.
template <typename T, class Op>
struct BinaryBroadcastBody {
  const T* a;
  const T* b;
  T* out;
  BroadcastGeometry g;
  PACKRAT_HD void operator()(int64_t i) const {
    out[i] = Op::apply(a[strided_offset(i, g.rank, g.size, g.stride_a, g.narrow)],
                       b[strided_offset(i, g.rank, g.size, g.stride_b, g.narrow)]);
  }
};

// out[i] = a[i] * s (s in T: the f32 kernel multiplies by the f32 scale, as the CPU does).
template <typename T>
struct ScaleBody {
  const T* a;
  T* out;
  T s;
  PACKRAT_HD void operator()(int64_t i) const { out[i] = a[i] * s; }
};

// dst[i] += src[i].
template <typename T>
struct AccumulateBody {
  T* dst;
  const T* src;
  PACKRAT_HD void operator()(int64_t i) const { dst[i] += src[i]; }
};

// ---- reductions

// One thread's share of reduce_sum / reduce_sum_squares: x[start], x[start + step], ... below n,
// summed (squared when Square) in double.
template <bool Square>
PACKRAT_HD inline double strided_sum(const float* x, int64_t n, int64_t start, int64_t step) {
  double s = 0.0;
  for (int64_t i = start; i < n; i += step) {
    const double v = x[i];
    s += Square ? v * v : v;
  }
  return s;
}

// reduce_sum_to: x's merged dims split into the kept ones (out is plain over them, in order) and
// the reduced ones (where the target shape has 1 or nothing), each with x's element strides.
// Output o sums x[keep_offset(o) + reduce_offset(r)] over r in [0, reduced).
struct SumToGeometry {
  int keep_rank = 0, reduce_rank = 0;
  int64_t keep_size[kMaxKernelDims] = {}, keep_stride[kMaxKernelDims] = {};
  int64_t reduce_size[kMaxKernelDims] = {}, reduce_stride[kMaxKernelDims] = {};
  int64_t outputs = 1, reduced = 1;  // M and K: x has M K elements
  bool narrow = false;                // x has fewer than 2^32 elements (strided_offset)
  PACKRAT_HD int64_t keep_offset(int64_t o) const {
    return strided_offset(o, keep_rank, keep_size, keep_stride, narrow);
  }
  PACKRAT_HD int64_t reduce_offset(int64_t r) const {
    return strided_offset(r, reduce_rank, reduce_size, reduce_stride, narrow);
  }
  // The reduction indices of split s of `splits`: [split_begin(s), split_begin(s + 1)).
  PACKRAT_HD int64_t split_begin(int64_t s, int64_t splits) const { return reduced * s / splits; }
};

// The sum over r = begin, begin + step, ... < end of output o's elements, in double: a thread's
// share of one output's sum.
template <typename T>
PACKRAT_HD inline double sum_to_share(const T* x, const SumToGeometry& g, int64_t o, int64_t begin, int64_t end,
                                      int64_t step) {
  const T* base = x + g.keep_offset(o);
  double s = 0.0;
  for (int64_t r = begin; r < end; r += step) s += static_cast<double>(base[g.reduce_offset(r)]);
  return s;
}

// reduce_sum_to with one thread per (output, split), index i = s M + o, so that neighbouring
// threads read neighbouring outputs (coalesced where the innermost dim is kept: column sums,
// every bias gradient). Writes out[i] in Out: T when splits == 1, else double partials (M per split).
template <typename T, typename Out>
struct SumToColumnsBody {
  const T* x;
  Out* out;
  SumToGeometry g;
  int64_t splits;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t o = i % g.outputs, s = i / g.outputs;
    out[i] = static_cast<Out>(sum_to_share(x, g, o, g.split_begin(s, splits), g.split_begin(s + 1, splits), 1));
  }
};

// out[o] = sum over the splits of partial[s M + o], in double, then T.
template <typename T>
struct SumPartialsBody {
  const double* partial;
  T* out;
  int64_t outputs, splits;
  PACKRAT_HD void operator()(int64_t o) const {
    double s = 0.0;
    for (int64_t k = 0; k < splits; ++k) s += partial[k * outputs + o];
    out[o] = static_cast<T>(s);
  }
};

}  // namespace packrat::cuda
