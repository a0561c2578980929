#pragma once
// Stochastic depth ("drop path", Huang et al. 2016) as torchvision's StochasticDepth(mode="row"):
// each sample of the batch is kept with probability 1 - p and then scaled by 1 / (1 - p), or
// zeroed whole; identity when !training or p == 0; p == 1 zeroes everything (no division, as
// torchvision). Used on the residual branch of EfficientNet's MBConv / Fused-MBConv blocks.
#include <cstdint>

#include "core/tensor.h"

namespace packrat::ops {

// x (N, ...) f32 any layout -> y like x. Sample n is kept where the uniform of dropout's element n
// (the Philox order of Backend::dropout_forward, keyed by (seed, stream)) is >= p. The per-sample
// keep mask (N, 1, ...) u8 0/1 is saved exactly as Need::Mask, op "drop_path".
Tensor drop_path(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream);

}  // namespace packrat::ops
