// CudaBackend: binary elementwise ops (same shape over the buffers as they lie, or numpy
// broadcasting into a plain out), scale, in-place accumulate and the reductions (kernels:
// elementwise_kernels.cu). The checks and messages are the CPU backend's.
#include <cuda_runtime.h>

#include <vector>

#include "core/broadcast.h"
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/elementwise_geometry.h"
#include "core/cuda/elementwise_kernels.h"

namespace packrat::cuda {

namespace {

ElementwiseOp kernel_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return ElementwiseOp::Add;
    case BinaryOp::Sub: return ElementwiseOp::Sub;
    case BinaryOp::Mul: return ElementwiseOp::Mul;
    case BinaryOp::Div: return ElementwiseOp::Div;
  }
  return ElementwiseOp::Add;
}

void check_float(const Tensor& t, const char* op) {
  PACKRAT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "{}: expects f32 or f64, got {}", op_where(op),
                dtype_name(t.dtype()));
}

}  // namespace

Tensor CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  PACKRAT_CHECK(a.dtype() == b.dtype(), "{}: operand dtypes {} and {} differ", op_where(name), dtype_name(a.dtype()),
                dtype_name(b.dtype()));
  PACKRAT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, "{}: expects f32 or f64 operands, got {}",
                op_where(name), dtype_name(a.dtype()));
  if (a.shape() == b.shape()) {
    const Tensor bl = b.to_layout(a.layout());
    Tensor out = Tensor::empty_like(a);
    launch_binary_same_shape(kernel_op(op), a.dtype(), a.raw(), bl.raw(), out.raw(), a.numel());
    PACKRAT_CHECK_LAUNCH("binary");
    return out;
  }
  const std::vector<int64_t> out_dims = broadcast_shape(op_where(name), a.shape(), b.shape());
  const Tensor ap = a.to_plain(), bp = b.to_plain();
  Tensor out = Tensor::empty(Shape(out_dims), a.dtype(), Layout::Plain, TagScope::current(), device());
  if (out.numel() == 0) return out;
  const BroadcastGeometry g = broadcast_geometry(out_dims, a.shape(), b.shape(), name);
  launch_binary_broadcast(kernel_op(op), a.dtype(), ap.raw(), bp.raw(), out.raw(), out.numel(), g);
  PACKRAT_CHECK_LAUNCH("binary");
  return out;
}

Tensor CudaBackend::scale(const Tensor& a, double s) {
  check_float(a, "scale");
  Tensor out = Tensor::empty_like(a);
  launch_scale(a.dtype(), a.raw(), out.raw(), a.numel(), s);
  PACKRAT_CHECK_LAUNCH("scale");
  return out;
}

void CudaBackend::accumulate(Tensor& dst, const Tensor& src_any) {
  PACKRAT_CHECK(dst.shape() == src_any.shape() && dst.dtype() == src_any.dtype() &&
                    (dst.dtype() == DType::f32 || dst.dtype() == DType::f64),
                "{}: cannot add {} into {}", op_where("accumulate"), src_any.describe(), dst.describe());
  const Tensor src = src_any.to_layout(dst.layout());
  launch_accumulate(dst.dtype(), dst.raw(), src.raw(), dst.numel());
  PACKRAT_CHECK_LAUNCH("accumulate");
  dst.bump_version();
}

namespace {

// The contract returns a host double: the one device-to-host copy (it waits for the kernels).
double reduce_to_host(const Tensor& x, bool squares, const char* name, Device device) {
  x.check_dtype(DType::f32, name);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const int64_t blocks = reduce_sum_blocks(n);
  const Tensor partial = Tensor::empty(Shape{blocks + 1}, DType::f64, Layout::Plain, MemTag::Workspace, device);
  launch_reduce_sum(x.device_data<float>(), n, squares, partial.device_data<double>());
  PACKRAT_CHECK_LAUNCH(name);
  double result = 0.0;
  PACKRAT_CUDA_CHECK(
      cudaMemcpy(&result, partial.device_data<double>() + blocks, sizeof(double), cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace

double CudaBackend::reduce_sum(const Tensor& x) { return reduce_to_host(x, false, "reduce_sum", device()); }

double CudaBackend::reduce_sum_squares(const Tensor& x) {
  return reduce_to_host(x, true, "reduce_sum_squares", device());
}

Tensor CudaBackend::reduce_sum_to(const Tensor& x_any, const Shape& shape) {
  check_float(x_any, "reduce_sum_to");
  check_broadcasts_to(op_where("reduce_sum_to"), x_any.shape(), shape);
  const Tensor x = x_any.to_plain();
  Tensor out = Tensor::empty(shape, x.dtype(), Layout::Plain, TagScope::current(), device());  // (shape), plain
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {  // empty sums
    fill(out, 0.0);
    return out;
  }
  const SumToGeometry g = sum_to_geometry(x.shape(), shape);
  const SumToPlan plan = plan_sum_to(g);
  PACKRAT_CHECK(!plan.rows || g.outputs * plan.splits < (int64_t{1} << 31), "{}: {} to {}: too many outputs",
                op_where("reduce_sum_to"), x.shape().str(), shape.str());
  Tensor partial;  // (splits, M) double partial sums, when split
  if (plan.partials() > 0)
    partial = Tensor::empty(Shape{plan.partials(), g.outputs}, DType::f64, Layout::Plain, MemTag::Workspace, device());
  launch_reduce_sum_to(x.dtype(), x.raw(), out.raw(), g, plan, partial.defined() ? partial.device_data<double>() : nullptr);
  PACKRAT_CHECK_LAUNCH("reduce_sum_to");
  return out;
}

}  // namespace packrat::cuda
