#pragma once
// The per-channel arithmetic of batchnorm's running statistics, written once (PACKRAT_HD) for the
// CPU loop and the CUDA kernel, so both devices keep the same running mean and variance.
#include "core/hd.h"

namespace packrat {

// (1 - momentum) running + momentum correction batch, in double: correction 1 for the mean,
// n / (n - 1) for the variance (an unbiased estimate), as PyTorch.
PACKRAT_HD inline float running_average(float running, float batch, float momentum, double correction) {
  return static_cast<float>((1.0 - momentum) * running + momentum * correction * batch);
}

}  // namespace packrat
