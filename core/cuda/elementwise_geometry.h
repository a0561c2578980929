#pragma once
// The kernel geometries of the CUDA elementwise section, built on the host from shapes: a
// broadcast's merged dims with each operand's strides, and reduce_sum_to's kept and summed dims.
// CUDA-free (but fmt: included by the g++-compiled CudaBackend and the host tests, never by a .cu).
#include <vector>

#include "core/allocator.h"
#include "core/broadcast.h"
#include "core/cuda/kernels/elementwise.h"
#include "core/error.h"
#include "core/shape.h"

namespace packrat::cuda {

inline void check_kernel_rank(size_t rank, const char* op, const Shape& shape) {
  PACKRAT_CHECK(rank <= static_cast<size_t>(kMaxKernelDims),
                "{}: {} needs {} merged dims; the CUDA kernels take at most {}", op_where(op), shape.str(), rank,
                kMaxKernelDims);
}

// A broadcast of a and b onto out_dims, merged, as the kernel reads it.
inline BroadcastGeometry broadcast_geometry(const std::vector<int64_t>& out_dims, const Shape& a, const Shape& b,
                                     const char* op) {
  const Broadcast bc = broadcast_dims(out_dims, {out_dims, a.dims(), b.dims()});
  check_kernel_rank(bc.size.size(), op, Shape(out_dims));
  BroadcastGeometry g;
  g.rank = static_cast<int>(bc.size.size());
  g.narrow = narrow_indices(Shape(out_dims).numel());
  for (size_t d = 0; d < bc.size.size(); ++d) {
    g.size[d] = bc.size[d];
    g.stride_a[d] = bc.stride[1][d];
    g.stride_b[d] = bc.stride[2][d];
  }
  return g;
}

// x's merged dims split into those kept in `shape` and those summed away.
inline SumToGeometry sum_to_geometry(const Shape& x, const Shape& shape) {
  const Broadcast bc = broadcast_dims(x.dims(), {x.dims(), shape.dims()});
  check_kernel_rank(bc.size.size(), "reduce_sum_to", x);
  SumToGeometry g;
  for (size_t d = 0; d < bc.size.size(); ++d) {
    if (bc.size[d] == 1) continue;  // a lone element (x of one element)
    if (bc.stride[1][d] != 0) {  // kept: out is plain over the kept dims, in order
      g.keep_size[g.keep_rank] = bc.size[d];
      g.keep_stride[g.keep_rank++] = bc.stride[0][d];
    } else {
      g.reduce_size[g.reduce_rank] = bc.size[d];
      g.reduce_stride[g.reduce_rank++] = bc.stride[0][d];
    }
  }
  g.outputs = shape.numel();
  g.reduced = g.outputs == 0 ? 0 : x.numel() / g.outputs;
  g.narrow = narrow_indices(x.numel());
  return g;
}

}  // namespace packrat::cuda
