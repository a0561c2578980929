#pragma once
// The per-element arithmetic of the fused optimizer updates (PyTorch's SGD and AdamW), written
// once (PACKRAT_HD) for the CPU loops and the CUDA kernels, so both devices take the same step.
#include <cmath>

#include "core/hd.h"

namespace packrat {

// SGD without momentum: p -= lr (g + wd p).
PACKRAT_HD inline float sgd_step(float p, float g, float lr, float wd) { return p - lr * (g + wd * p); }

// SGD with momentum (damp = 1 - dampening): d = g + wd p; buf = first ? d : momentum buf + damp d;
// p -= lr (nesterov ? d + momentum buf : buf).
PACKRAT_HD inline void sgd_momentum_step(float& p, float g, float& buf, float lr, float wd, float momentum, float damp,
                                         bool nesterov, bool first) {
  const float d = g + wd * p;
  buf = first ? d : momentum * buf + damp * d;
  p -= lr * (nesterov ? d + momentum * buf : buf);
}

// AdamW: p *= decay; m += (g - m)(1 - b1) (a lerp, as PyTorch); v = b2 v + (1 - b2) g^2;
// p -= step_size m / (sqrt(v) / bc2_sqrt + eps).
PACKRAT_HD inline void adamw_step(float& p, float g, float& m, float& v, float decay, float b1, float b2,
                                  float step_size, float bc2_sqrt, float eps) {
  p *= decay;
  m += (g - m) * (1.0f - b1);
  v = b2 * v + (1.0f - b2) * g * g;
  const float denom = std::sqrt(v) / bc2_sqrt + eps;
  p -= step_size * m / denom;
}

}  // namespace packrat
