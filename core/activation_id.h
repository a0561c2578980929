#pragma once
// The built-in pointwise activations: the one list every table over them is generated from (the
// ids, names, Activation<id> types and the runtime switch of core/pointwise_math.h, the CPU loop
// table of core/cpu/pointwise_loops.cpp, the op table of autograd/pointwise.cpp).
//
// A row: X(name, derivative, even, step)
//   name        the config's name, and the suffix of its math in core/pointwise_math.h:
//               pwmath::<name>_f, <name>_df, and <name>_df_from_y where f' comes from the output;
//   derivative  from_input, or from_output where PyTorch saves y = f(x) instead of x;
//   even        f'(-x) = f'(x) (sigmoid, tanh): few-bit tables cover |x|;
//   step        f' is a step function (the relu family): exact 1-bit masks, no table.
// Adding an activation: a row here, its f32 math in core/pointwise_math.h and its f64 math for the
// few-bit solver (quant/fewbit/fewbit_functions.cpp). Ids follow the rows' order.
#include <cstdint>

#define PACKRAT_ACTIVATIONS(X)                       \
  X(relu, from_output, false, true)                  \
  X(leaky_relu, from_input, false, true)             \
  X(relu6, from_input, false, true)                  \
  X(hardswish, from_input, false, false)             \
  X(gelu, from_input, false, false)                  \
  X(silu, from_input, false, false)                  \
  X(sigmoid, from_output, true, false)               \
  X(tanh, from_output, true, false)                  \
  X(selu, from_input, false, false)                  \
  X(softplus, from_input, false, false)              \
  X(elu, from_input, false, false)                   \
  X(mish, from_input, false, false)                  \
  X(gelu_tanh, from_input, false, false) /* GELU, approximate='tanh' */

namespace packrat {

enum class ActivationId : uint8_t {
#define PACKRAT_ACTIVATION_ID(name, derivative, even, step) name,
  PACKRAT_ACTIVATIONS(PACKRAT_ACTIVATION_ID)
#undef PACKRAT_ACTIVATION_ID
};

#define PACKRAT_ACTIVATION_COUNT(name, derivative, even, step) +1
constexpr int kNumActivations = 0 PACKRAT_ACTIVATIONS(PACKRAT_ACTIVATION_COUNT);
#undef PACKRAT_ACTIVATION_COUNT

}  // namespace packrat
