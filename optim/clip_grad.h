#pragma once
// torch.nn.utils.clip_grad_norm_: scales every gradient by max_norm / (total + 1e-6) when the
// total L2 norm over all gradients exceeds max_norm. Returns the total norm before clipping.
// Parameters without a gradient are skipped.
#include <vector>

#include "core/tensor.h"

namespace packrat {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace packrat
