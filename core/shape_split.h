#pragma once
// A shape split around one dimension: a tensor is (outer, shape[dim], inner), the view every
// concat / narrow / permute along one dim takes (both backends' shape primitives).
#include <cstdint>

#include "core/shape.h"

namespace packrat {

// Elements before `dim`.
inline int64_t outer_of(const Shape& s, int64_t dim) {
  int64_t n = 1;
  for (int64_t i = 0; i < dim; ++i) n *= s[i];
  return n;
}
// Elements after `dim`.
inline int64_t inner_of(const Shape& s, int64_t dim) {
  int64_t n = 1;
  for (int64_t i = dim + 1; i < s.rank(); ++i) n *= s[i];
  return n;
}

}  // namespace packrat
