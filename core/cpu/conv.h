#pragma once
// oneDNN convolution kernels on packrat tensors (forward, backward data, backward weights).
// Shape checks belong to the op (autograd/ops/conv2d.cpp); these assume a valid geometry.
//
// Layouts: the primitive reads src in nChw16c when Cin % 16 == 0 (plain otherwise) and writes
// dst in nChw16c when Cout % 16 == 0 (plain otherwise); x is reordered only when it is not
// already in the src layout. Weights are plain OIHW tensors, reordered to the primitive's
// format through the weight cache. Primitive descriptors and primitives are cached per geometry.
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace packrat::cpu {

struct ConvGeometry {
  int64_t N, Cin, H, W, Cout, KH, KW, OH, OW;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  bool has_bias;

  Layout src_layout() const { return Cin % kChannelBlock == 0 ? Layout::nChw16c : Layout::Plain; }
  Layout dst_layout() const { return Cout % kChannelBlock == 0 ? Layout::nChw16c : Layout::Plain; }
  double flops() const { return 2.0 * N * Cout * OH * OW * (Cin / groups) * KH * KW; }  // per pass
  std::string key() const;
};

// y (N, Cout, OH, OW) in dst_layout(). x in any layout; bias (Cout) or undefined.
// keep_weights: the weight will be used again unchanged (eval, frozen): keep its reordered copy.
Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool keep_weights);
// dx (N, Cin, H, W) in src_layout(), from gy (any layout) and the plain weight.
Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g);
// gw (Cout, Cin/groups, KH, KW) plain and gb (Cout) when has_bias, from x and gy (any layout).
void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb);

}  // namespace packrat::cpu
