// The built-in pointwise activations as the table the ops and the stores use: each one's name,
// id, scalar f and f' (core/pointwise_math.h, PyTorch's definitions) and the CPU's vectorised
// loops over them (core/cpu/pointwise_loops.h), with the facts the stores need.
#include "autograd/pointwise.h"

#include <fmt/format.h>

#include <array>
#include <string>

#include "core/cpu/pointwise_loops.h"
#include "core/error.h"
#include "core/pointwise_math.h"

namespace packrat {
namespace {

template <class A>
float scalar_f(float x) {
  return A::f(x);
}
template <class A>
float scalar_df(float x) {
  return A::df(x);
}

// even_derivative: f'(-x) = f'(x) (sigmoid, tanh); derivative_is_step: the relu family
// (core/activation_id.h).
Pointwise make(ActivationId id, bool even_derivative, bool derivative_is_step) {
  const cpu::PointwiseLoops& loops = cpu::pointwise_loops(id);
  return with_activation(id, [&](auto a) {
    using A = decltype(a);
    return Pointwise{loops.name,        id, scalar_f<A>, scalar_df<A>, loops.forward, loops.derivative,
                     loops.derivative_from_output, even_derivative, derivative_is_step};
  });
}

// Indexed by ActivationId.
const std::array<Pointwise, kNumActivations>& all() {
#define PACKRAT_POINTWISE(ID, DERIVATIVE, EVEN, STEP) make(ActivationId::ID, EVEN, STEP),
  static const std::array<Pointwise, kNumActivations> table{PACKRAT_ACTIVATIONS(PACKRAT_POINTWISE)};
#undef PACKRAT_POINTWISE
  return table;
}

const Pointwise* find(std::string_view name) {
  for (const Pointwise& p : all())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

std::string pointwise_names(std::string_view quote) {
  std::string names;
  for (const Pointwise& p : all()) names += fmt::format("{}{}{}{}", names.empty() ? "" : ", ", quote, p.name, quote);
  return names;
}

const Pointwise& pointwise_by_name(std::string_view name) {
  if (const Pointwise* p = find(name)) return *p;
  fail("activation: unknown function '{}' (known: {})", name, pointwise_names());
}

bool is_pointwise_name(std::string_view name) { return find(name) != nullptr; }

const Pointwise& pointwise_by_id(ActivationId id) {
  const auto i = static_cast<size_t>(id);
  PACKRAT_CHECK(i < static_cast<size_t>(kNumActivations) && all()[i].id == id, "activation: unknown id {}", i);
  return all()[i];
}

}  // namespace packrat
