#pragma once
// Launchers of the CUDA elementwise section (elementwise_kernels.cu): binary ops (same shape or
// broadcast), scale, accumulate over f32 / f64 buffers, and the reductions. CUDA- and fmt-free,
// so that the g++-compiled CudaBackend calls them; the caller checks the launch.
#include <algorithm>
#include <cstdint>

#include "core/cuda/kernels/elementwise.h"
#include "core/dtype.h"

namespace packrat::cuda {

enum class ElementwiseOp : uint8_t { Add, Sub, Mul, Div };

// out[i] = a[i] op b[i], n elements of dtype (f32 or f64).
void launch_binary_same_shape(ElementwiseOp op, DType dtype, const void* a, const void* b, void* out, int64_t n);
// out (n elements, plain over g's dims) = a op b broadcast.
void launch_binary_broadcast(ElementwiseOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
                             const BroadcastGeometry& g);
void launch_scale(DType dtype, const void* a, void* out, int64_t n, double s);
void launch_accumulate(DType dtype, void* dst, const void* src, int64_t n);

// reduce_sum / reduce_sum_squares: per-block partial sums, then their sum into partial[blocks]
// (a device double the caller copies to the host). partial holds reduce_sum_blocks(n) + 1 doubles.
constexpr int64_t kReduceMaxBlocks = 1024;
inline int64_t reduce_sum_blocks(int64_t n) { return std::clamp<int64_t>((n + 255) / 256, 1, kReduceMaxBlocks); }
void launch_reduce_sum(const float* x, int64_t n, bool squares, double* partial);

// How reduce_sum_to runs for a geometry: `rows` (the innermost dim is reduced and long: a block
// per output and split, block_sum over contiguous elements) or columns (a thread per output and
// split: coalesced where the innermost dim is kept, e.g. every bias gradient); `splits` cuts
// each output's reduction into that many parts, summed by a second pass from double partials
// (splits M of them) when splits > 1, so that few outputs with long sums still fill the GPU.
// A fixed function of the geometry: the sum order, and so the result, does not depend on the GPU.
struct SumToPlan {
  bool rows = false;
  int64_t splits = 1;
  int64_t partials() const { return splits > 1 ? splits : 0; }  // times M doubles of workspace
};
inline SumToPlan plan_sum_to(const SumToGeometry& g) {
  const int64_t M = g.outputs, K = g.reduced;
  const bool innermost_reduced = g.reduce_rank > 0 && g.reduce_stride[g.reduce_rank - 1] == 1;
  SumToPlan plan;
  plan.rows = innermost_reduced && K >= 64;
  // rows: about 1024 blocks of 256 threads, each summing at least 4096 elements; columns: about
  // 256k threads, each summing at least 32 elements.
  const int64_t want = plan.rows ? (1024 + M - 1) / M : ((int64_t{1} << 18) + M - 1) / M;
  const int64_t most = std::max<int64_t>(1, K / (plan.rows ? 4096 : 32));
  plan.splits = std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 1024));
  return plan;
}
// out (M elements of dtype) = sums of x by g; partial: plan.partials() * M doubles, or null.
void launch_reduce_sum_to(DType dtype, const void* x, void* out, const SumToGeometry& g, const SumToPlan& plan,
                          double* partial);

}  // namespace packrat::cuda
