#pragma once
// The built-in pointwise activations by id: what a backend's pointwise primitives dispatch on.
// Their math (f and f') lives in core/pointwise_math.h, the CPU's vectorised loops over it in
// core/cpu/pointwise_loops.h.
#include <cstdint>

namespace packrat {

enum class ActivationId : uint8_t {
  relu, leaky_relu, relu6, hardswish, gelu, silu, sigmoid, tanh, selu, softplus, elu, mish,
  gelu_tanh  // GELU, approximate='tanh'
};
constexpr int kNumActivations = 13;

}  // namespace packrat
