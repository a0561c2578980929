#pragma once
// A pointwise activation: its scalar f and f' (for tables and tests) and the CPU's vectorised loops
// over buffers (for the ops and the stores). One instance per activation, see pointwise.cpp.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/activation_id.h"

namespace packrat {

struct Pointwise {
  std::string_view name;
  ActivationId id;  // what the backends' pointwise primitives dispatch on
  float (*f)(float);
  float (*df)(float);
  void (*forward)(const float* x, float* y, int64_t n);     // y = f(x)
  void (*derivative)(const float* x, float* d, int64_t n);  // d = f'(x)
  // Non-null where PyTorch saves the output instead of the input (relu, sigmoid, tanh):
  // d = f'(x) computed from y = f(x). The FP32 store then keeps y, as PyTorch does, which
  // is usually the very tensor the next layer saves too (counted once).
  void (*derivative_from_output)(const float* y, float* d, int64_t n) = nullptr;
  bool even_derivative = false;  // f'(-x) = f'(x) (sigmoid, tanh): tables cover |x|
  // Continuous derivative (needs a table) or a step function (relu family: exact masks).
  bool derivative_is_step = false;
};

// The built-in activations (core/activation_id.h: relu, gelu, silu, ...). Throws packrat::Error
// naming the function and the known ones when unknown.
const Pointwise& pointwise_by_name(std::string_view name);
bool is_pointwise_name(std::string_view name);
// Their names in id order, each wrapped in `quote` and joined by ", " ("relu, leaky_relu, ...").
std::string pointwise_names(std::string_view quote = "");
const Pointwise& pointwise_by_id(ActivationId id);

}  // namespace packrat
