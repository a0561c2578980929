// The CUDA elementwise section's kernels: grid-stride bodies of kernels/elementwise.h for the
// binary ops, scale and accumulate; block reductions (block_sum, in double) for reduce_sum,
// reduce_sum_squares and the row case of reduce_sum_to.
#include "core/cuda/elementwise_kernels.h"

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

namespace {

// fn(T{}) for the element type of an f32 or f64 buffer.
template <typename Fn>
void with_float_type(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

template <typename Fn>
void with_op(ElementwiseOp op, Fn&& fn) {
  switch (op) {
    case ElementwiseOp::Add: fn(AddOp{}); break;
    case ElementwiseOp::Sub: fn(SubOp{}); break;
    case ElementwiseOp::Mul: fn(MulOp{}); break;
    case ElementwiseOp::Div: fn(DivOp{}); break;
  }
}

// Block b sums its grid-stride share of x (squared when Square) into partial[b].
template <bool Square>
__global__ void sum_blocks_kernel(const float* x, int64_t n, double* partial) {
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const double v = block_sum(strided_sum<Square>(x, n, start, static_cast<int64_t>(gridDim.x) * blockDim.x));
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// One block: *result = the sum of partial[0, count).
__global__ void sum_partials_kernel(const double* partial, int64_t count, double* result) {
  double v = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) v += partial[i];
  v = block_sum(v);
  if (threadIdx.x == 0) *result = v;
}

// Block i = s M + o sums split s of output o over contiguous elements (the innermost dim is
// reduced): out[i], T or a double partial.
template <typename T, typename Out>
__global__ void sum_to_rows_kernel(const T* x, Out* out, SumToGeometry g, int64_t splits) {
  const int64_t i = blockIdx.x, o = i % g.outputs, s = i / g.outputs;
  const int64_t begin = g.split_begin(s, splits), end = g.split_begin(s + 1, splits);
  const double v = block_sum(sum_to_share(x, g, o, begin + threadIdx.x, end, static_cast<int64_t>(blockDim.x)));
  if (threadIdx.x == 0) out[i] = static_cast<Out>(v);
}

}  // namespace

void launch_binary_same_shape(ElementwiseOp op, DType dtype, const void* a, const void* b, void* out, int64_t n) {
  with_float_type(dtype, [&](auto t) {
    using T = decltype(t);
    with_op(op, [&](auto f) {
      launch_for_each(quads_of(n), BinarySameShapeBody<T, decltype(f)>{static_cast<const T*>(a), static_cast<const T*>(b),
                                                                        static_cast<T*>(out), n});
    });
  });
}

void launch_binary_broadcast(ElementwiseOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
                             const BroadcastGeometry& g) {
  with_float_type(dtype, [&](auto t) {
    using T = decltype(t);
    with_op(op, [&](auto f) {
      launch_for_each(n, BinaryBroadcastBody<T, decltype(f)>{static_cast<const T*>(a), static_cast<const T*>(b),
                                                              static_cast<T*>(out), g});
    });
  });
}

void launch_scale(DType dtype, const void* a, void* out, int64_t n, double s) {
  with_float_type(dtype, [&](auto t) {
    using T = decltype(t);
    launch_for_each(n, ScaleBody<T>{static_cast<const T*>(a), static_cast<T*>(out), static_cast<T>(s)});
  });
}

void launch_accumulate(DType dtype, void* dst, const void* src, int64_t n) {
  with_float_type(dtype, [&](auto t) {
    using T = decltype(t);
    launch_for_each(n, AccumulateBody<T>{static_cast<T*>(dst), static_cast<const T*>(src)});
  });
}

void launch_reduce_sum(const float* x, int64_t n, bool squares, double* partial) {
  const auto blocks = static_cast<unsigned>(reduce_sum_blocks(n));
  if (squares) {
    sum_blocks_kernel<true><<<blocks, kThreadsPerBlock>>>(x, n, partial);
  } else {
    sum_blocks_kernel<false><<<blocks, kThreadsPerBlock>>>(x, n, partial);
  }
  sum_partials_kernel<<<1, 1024>>>(partial, blocks, partial + blocks);
}

void launch_reduce_sum_to(DType dtype, const void* x, void* out, const SumToGeometry& g, const SumToPlan& plan,
                          double* partial) {
  with_float_type(dtype, [&](auto t) {
    using T = decltype(t);
    const T* xs = static_cast<const T*>(x);
    T* o = static_cast<T*>(out);
    const int64_t tasks = g.outputs * plan.splits;  // (output, split) pairs
    if (plan.rows) {
      if (plan.splits > 1) {
        sum_to_rows_kernel<<<static_cast<unsigned>(tasks), kThreadsPerBlock>>>(xs, partial, g, plan.splits);
      } else {
        sum_to_rows_kernel<<<static_cast<unsigned>(tasks), kThreadsPerBlock>>>(xs, o, g, plan.splits);
      }
    } else if (plan.splits > 1) {
      launch_for_each(tasks, SumToColumnsBody<T, double>{xs, partial, g, plan.splits});
    } else {
      launch_for_each(tasks, SumToColumnsBody<T, T>{xs, o, g, plan.splits});
    }
    if (plan.splits > 1) launch_for_each(g.outputs, SumPartialsBody<T>{partial, o, g.outputs, plan.splits});
  });
}

}  // namespace packrat::cuda
