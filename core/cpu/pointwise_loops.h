#pragma once
// The CPU's vectorised loops of the pointwise activations (f, f' and f' from the output) over
// buffers, by ActivationId: what the CPU backend's pointwise primitives run and what the
// Pointwise table (autograd/pointwise.h) hands to the quantizing stores' CPU kernels.
#include <cstdint>
#include <string_view>

#include "core/activation_id.h"

namespace packrat::cpu {

using PointwiseLoop = void (*)(const float* x, float* y, int64_t n);

struct PointwiseLoops {
  std::string_view name;  // "gelu"
  PointwiseLoop forward;     // y = f(x)
  PointwiseLoop derivative;  // d = f'(x)
  // d = f'(x) from y = f(x), where PyTorch saves the output (relu, sigmoid, tanh); null otherwise.
  PointwiseLoop derivative_from_output;
};

// The loops of `id`; throws packrat::Error on an id out of range.
const PointwiseLoops& pointwise_loops(ActivationId id);

}  // namespace packrat::cpu
