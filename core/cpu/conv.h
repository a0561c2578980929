#pragma once
// oneDNN convolution kernels on packrat tensors (forward, backward data, backward weights).
// Shape checks belong to the op (autograd/ops/conv2d.cpp); these assume a valid geometry.
//
// Layouts: the primitive reads src in the CPU's blocked layout (core/cpu/layout.h: nChw16c with
// AVX-512, nChw8c without) when Cin is a multiple of its block (plain otherwise) and writes dst
// in it when Cout is -- what format_tag::any picks for oneDNN's jit kernels wherever it is
// representable without padding. Where that mix has only oneDNN's reference kernel (e.g. 40 -> 80
// channels on AVX-512, plain src and blocked dst: ref:any, ~100x slower), src and dst are both
// plain instead. Where plain operands would run on im2col + gemm without AVX-512, the jit kernels
// run on nChw8c copies instead (Workspace buffers reordered at the call's edges, as PyTorch runs
// its NCHW tensors). Likewise bf16 convolutions on a CPU with AMX run on channels-last copies,
// the only format oneDNN's AMX kernels read, the output gradient's made once for both backward
// kernels (conv_grad_output). No Winograd without AVX-512. Where even that has no jit kernel, the plain
// gemm kernels read the plain OIHW weights in place. conv_layouts() says what was chosen; x is
// reordered only when it is not already in the src layout. Weights are plain OIHW tensors,
// reordered to the primitive's format through the weight cache. Primitive descriptors and
// primitives are cached per geometry.
#include <cstdint>
#include <string>
#include <utility>

#include "core/backend.h"
#include "core/cpu/layout.h"
#include "core/tensor.h"

namespace packrat::cpu {

// ConvGeometry and the ConvAlgorithm setting are device-agnostic: core/backend.h. Auto lets
// oneDNN pick Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions where it is faster (ResNet-18
// step ~1.3x faster here) at the price of a larger scratchpad (Workspace tag: ResNet-18 at batch
// 128 peaks 143 MiB of Workspace instead of 9); Direct keeps memory lowest. Plans are cached per
// geometry and algorithm, so switching is safe at any time.

struct ConvLayouts {
  Layout src, dst;
  std::string implementation;  // oneDNN's forward kernel, e.g. "jit:avx512_core"
  bool plain_weights;          // the forward kernel reads the plain OIHW weight (no reorder, no cache)
};
// The layouts (and forward kernel) the primitive for this geometry uses.
ConvLayouts conv_layouts(const ConvGeometry& g);
// oneDNN's backward-data and backward-weights kernels for this geometry (creates them).
std::pair<std::string, std::string> conv_backward_implementations(const ConvGeometry& g);

// y (N, Cout, OH, OW) in conv_layouts(g).dst. x in any layout; bias (Cout) or undefined.
// keep_weights: the weight will be used again unchanged (eval, frozen): keep its reordered copy.
Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool keep_weights);
// gy (N, Cout, OH, OW) f32 any layout -> what conv_backward_data and conv_backward_weights read
// for g, in g.dtype: where both kernels read one channels-last format (AMX), a copy in it
// (Layout::NHWC, never seen outside the convolution's backward), converted and reordered in one
// oneDNN reorder and read by both without another; else gy in g.dtype.
Tensor conv_grad_output(const Tensor& gy, const ConvGeometry& g);
// dx (N, Cin, H, W) in the backward kernel's layout (conv_layouts(g).src unless that mix had
// only the reference kernel: plain), from gy (any layout) and the plain weight.
Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g);
// gw (Cout, Cin/groups, KH, KW) plain and gb (Cout) when has_bias, from x and gy (any layout).
void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb);
// What conv_backward_weights computes in for g: f32 for a 16-bit geometry whose weight gradient
// runs f32 kernels on the 16-bit values (strided without AMX; 1x1 and strided grouped ones on
// AMX; depthwise through packrat's own loop), else g.dtype.
DType weight_gradient_dtype(const ConvGeometry& g);

}  // namespace packrat::cpu
