// CudaBackend: shape primitives: the batched last-two-dims transpose, the option-A shortcut's
// channel pad + subsample, general permute, concat / narrow along one dim and the causal mask
// (the kernels: shape_kernels.cu, their bodies: kernels/shape.h). Outputs are plain; a blocked
// input is read as plain.
#include <algorithm>
#include <vector>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels/shape.h"  // kMaxPermuteRank
#include "core/cuda/shape_kernels.h"
#include "core/shape_split.h"

namespace packrat::cuda {

namespace {

// The element `offset` elements into t's buffer.
const void* element_at(const Tensor& t, int64_t offset) {
  return static_cast<const char*>(t.raw()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}
void* element_at(Tensor& t, int64_t offset) {
  return static_cast<char*>(t.raw()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

Tensor CudaBackend::transpose_last2(const Tensor& x_any) {
  const Tensor x = x_any.to_plain();
  PACKRAT_CHECK(x.rank() >= 2, "transpose_last2: needs at least 2 dims, got {}", x.shape().str());
  std::vector<int64_t> dims = x.shape().dims();
  const int64_t M = dims[dims.size() - 2], N = dims[dims.size() - 1];
  const int64_t B = M * N == 0 ? 0 : x.numel() / (M * N);
  std::swap(dims[dims.size() - 2], dims[dims.size() - 1]);
  Tensor y = Tensor::empty(Shape(dims), x.dtype(), Layout::Plain, TagScope::current(), device());  // (..., N, M)
  launch_transpose_last2(x.raw(), y.raw(), x.dtype(), B, M, N);
  PACKRAT_CHECK_LAUNCH("transpose_last2");
  return y;
}

Tensor CudaBackend::pad_channels_subsample(const Tensor& x_any, int64_t out_channels, int64_t stride) {
  const Tensor x = x_any.to_plain();
  PACKRAT_CHECK(x.rank() == 4 && x.dtype() == DType::f32 && out_channels >= x.dim(1) && stride >= 1,
                "pad_channels_subsample: expects f32 (N, C, H, W) with C <= {} and stride {} >= 1, got {}", out_channels,
                stride, x.describe());
  const int64_t N = x.dim(0), Cin = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = (H + stride - 1) / stride, Wo = (W + stride - 1) / stride;
  Tensor y = Tensor::empty({N, out_channels, Ho, Wo}, DType::f32, Layout::Plain, TagScope::current(),
                           device());  // (N, Cout, Ho, Wo)
  launch_pad_channels_subsample(x.device_data<float>(), y.device_data<float>(), N, Cin, H, W, out_channels, stride);
  PACKRAT_CHECK_LAUNCH("pad_channels_subsample");
  return y;
}

Tensor CudaBackend::pad_channels_subsample_backward(const Tensor& grad_any, const Shape& x_shape, Layout x_layout,
                                                    int64_t stride) {
  const Tensor grad = grad_any.to_plain();
  PACKRAT_CHECK(x_shape.rank() == 4 && grad.rank() == 4 && grad.dim(0) == x_shape[0] && grad.dim(1) >= x_shape[1],
                "pad_channels_subsample backward: gradient {} for input {}", grad.shape().str(), x_shape.str());
  const int64_t N = x_shape[0], Cin = x_shape[1], H = x_shape[2], W = x_shape[3], Cout = grad.dim(1);
  Tensor gx = Tensor::empty(x_shape, DType::f32, Layout::Plain, TagScope::current(), device());  // (N, Cin, H, W)
  launch_pad_channels_subsample_backward(grad.device_data<float>(), gx.device_data<float>(), N, Cin, H, W, Cout,
                                         stride);
  PACKRAT_CHECK_LAUNCH("pad_channels_subsample_backward");
  return to_layout(gx, x_layout);
}

Tensor CudaBackend::permute(const Tensor& x_any, std::span<const int64_t> perm) {
  const Tensor x = x_any.to_plain();
  const int64_t r = x.rank();
  PACKRAT_CHECK(static_cast<int64_t>(perm.size()) == r, "permute: {} axes for a {}-d tensor", perm.size(), r);
  PACKRAT_CHECK(r <= kMaxPermuteRank, "permute: the CUDA backend permutes up to {} axes, got a {}-d tensor {}",
                kMaxPermuteRank, r, x.shape().str());
  std::vector<int64_t> in_stride(static_cast<size_t>(r), 1);
  for (int64_t k = r - 2; k >= 0; --k) in_stride[k] = in_stride[k + 1] * x.dim(k + 1);
  std::vector<int64_t> out_dims(static_cast<size_t>(r)), src_stride(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) {
    out_dims[k] = x.dim(perm[k]);
    src_stride[k] = in_stride[perm[k]];
  }
  Tensor y = Tensor::empty(Shape(out_dims), x.dtype(), Layout::Plain, TagScope::current(), device());
  launch_permute(x.raw(), y.raw(), x.dtype(), static_cast<int>(r), out_dims.data(), src_stride.data(), y.numel());
  PACKRAT_CHECK_LAUNCH("permute");
  return y;
}

Tensor CudaBackend::concat(std::span<const Tensor> xs_any, int64_t dim) {
  PACKRAT_CHECK(!xs_any.empty(), "concat: no inputs");
  std::vector<Tensor> xs;
  for (const Tensor& t : xs_any) xs.push_back(t.to_plain());
  std::vector<int64_t> dims = xs[0].shape().dims();
  dims[dim] = 0;
  for (const Tensor& t : xs) dims[dim] += t.dim(dim);
  Tensor y = Tensor::empty(Shape(dims), xs[0].dtype(), Layout::Plain, TagScope::current(),
                           device());  // (..., sum of d_dim, ...)
  const int64_t outer = outer_of(y.shape(), dim), out_run = dims[dim] * inner_of(y.shape(), dim);
  int64_t offset = 0;  // elements into each output run
  for (const Tensor& t : xs) {
    const int64_t run = t.dim(dim) * inner_of(t.shape(), dim);
    launch_run_copy(t.raw(), element_at(y, offset), y.dtype(), outer, run, run, out_run);
    PACKRAT_CHECK_LAUNCH("concat");
    offset += run;
  }
  return y;
}

Tensor CudaBackend::narrow(const Tensor& x_any, int64_t dim, int64_t start, int64_t length) {
  const Tensor x = x_any.to_plain();
  PACKRAT_CHECK(dim >= 0 && dim < x.rank() && start >= 0 && length >= 0 && start + length <= x.dim(dim),
                "narrow: [{}, {}) of dim {} is outside {}", start, start + length, dim, x.shape().str());
  std::vector<int64_t> dims = x.shape().dims();
  dims[dim] = length;
  Tensor y = Tensor::empty(Shape(dims), x.dtype(), Layout::Plain, TagScope::current(), device());  // (..., length, ...)
  const int64_t outer = outer_of(x.shape(), dim), inner = inner_of(x.shape(), dim);
  const int64_t in_run = x.dim(dim) * inner, out_run = length * inner;
  launch_run_copy(element_at(x, start * inner), y.raw(), x.dtype(), outer, out_run, in_run, out_run);
  PACKRAT_CHECK_LAUNCH("narrow");
  return y;
}

void CudaBackend::causal_mask_fill(Tensor& scores) {
  PACKRAT_CHECK(scores.dtype() == DType::f32 && scores.layout() == Layout::Plain && scores.rank() >= 2,
                "causal_mask_fill: expects plain f32 scores (..., T, S), got {}", scores.shape().str());
  const int64_t T = scores.dim(-2), S = scores.dim(-1);
  PACKRAT_CHECK(T <= S, "causal_mask_fill: {} queries for {} keys", T, S);
  launch_causal_mask_fill(scores.device_data<float>(), scores.numel(), T, S);
  PACKRAT_CHECK_LAUNCH("causal_mask_fill");
}

}  // namespace packrat::cuda
