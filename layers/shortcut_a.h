#pragma once
// The parameter-free "option A" shortcut of He et al. 2016 (section 4.2, CIFAR ResNets):
// subsample by `stride` (x[:, :, ::s, ::s]) and zero-pad the channel dimension from Cin to Cout,
// (Cout - Cin) / 2 zero channels in front and the rest behind, as the common reference
// implementations do. A differentiable op of its own; it saves nothing for backward.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

// x (N, Cin, H, W) plain or blocked -> (N, Cout, ceil(H/s), ceil(W/s)); blocked stays blocked
// when Cout allows it.
Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride);

class ShortcutA : public Module {
 public:
  ShortcutA(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t in_, out_, stride_;
};

}  // namespace packrat
