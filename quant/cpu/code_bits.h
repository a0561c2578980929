#pragma once
// A runtime code width as a compile-time one, for the CPU kernels that unroll per width.
#include <type_traits>
#include <utility>

namespace packrat {

// Calls fn(std::integral_constant<int, B>{}) with B = bits when 1 <= bits <= Max and returns
// true; returns false, calling nothing, otherwise.
template <int Max, typename Fn>
bool with_code_bits(int bits, Fn&& fn) {
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    return ((bits == I + 1 ? (fn(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, Max>{});
}

}  // namespace packrat
