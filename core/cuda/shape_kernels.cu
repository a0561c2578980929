// The shape primitives' kernels: a per-index body (kernels/shape.h) per output element, typed by
// with_typed so that every dtype moves.
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernels/shape.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/shape_kernels.h"
#include "core/typed_dispatch.h"

namespace packrat::cuda {

void launch_transpose_last2(const void* x, void* y, DType dtype, int64_t B, int64_t M, int64_t N) {
  with_typed(y, dtype, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    launch_for_each(B * M * N, TransposeLast2<T>{static_cast<const T*>(x), out, M, N});
  });
}

void launch_pad_channels_subsample(const float* x, float* y, int64_t N, int64_t Cin, int64_t H, int64_t W,
                                   int64_t Cout, int64_t stride) {
  const int64_t Ho = (H + stride - 1) / stride, Wo = (W + stride - 1) / stride;
  launch_for_each(N * Cout * Ho * Wo, PadChannelsSubsample{x, y, Cin, H, W, Cout, Ho, Wo, stride, (Cout - Cin) / 2});
}

void launch_pad_channels_subsample_backward(const float* grad, float* gx, int64_t N, int64_t Cin, int64_t H, int64_t W,
                                            int64_t Cout, int64_t stride) {
  const int64_t Ho = (H + stride - 1) / stride, Wo = (W + stride - 1) / stride;
  launch_for_each(N * Cin * H * W,
                  PadChannelsSubsampleBackward{grad, gx, Cin, H, W, Cout, Ho, Wo, stride, (Cout - Cin) / 2});
}

void launch_permute(const void* x, void* y, DType dtype, int rank, const int64_t* out_dims, const int64_t* src_stride,
                    int64_t numel) {
  with_typed(y, dtype, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    auto launch = [&](auto index) {
      using Index = decltype(index);
      Permute<T, Index> body{static_cast<const T*>(x), out, rank, {}, {}};
      for (int k = 0; k < rank; ++k) {
        body.out_dims[k] = static_cast<Index>(out_dims[k]);
        body.src_stride[k] = static_cast<Index>(src_stride[k]);
      }
      launch_for_each(numel, body);
    };
    // Every offset is below numel (x has as many elements as y).
    if (numel <= static_cast<int64_t>(UINT32_MAX)) launch(uint32_t{0});
    else launch(int64_t{0});
  });
}

void launch_run_copy(const void* src, void* dst, DType dtype, int64_t outer, int64_t run, int64_t src_pitch,
                     int64_t dst_pitch) {
  with_typed(dst, dtype, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    launch_for_each(outer * run, RunCopy<T>{static_cast<const T*>(src), out, run, src_pitch, dst_pitch});
  });
}

void launch_causal_mask_fill(float* scores, int64_t numel, int64_t T, int64_t S) {
  launch_for_each(numel, CausalMaskFill{scores, T, S});
}

}  // namespace packrat::cuda
