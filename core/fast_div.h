#pragma once
// x / d for 0 <= x < 2^31 and a divisor d fixed before a kernel runs, by one 32 x 32 -> 64-bit
// multiply and a shift (a GPU divides integers in software, some twenty instructions): m =
// ceil(2^(31 + l) / d), l = ceil(log2 d), gives floor(x m / 2^(31 + l)) = floor(x / d) for every
// x < 2^31 (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994,
// theorem 4.2: 2^(31 + l) <= m d <= 2^(31 + l) + 2^l). m < 2^32, so the product fits 64 bits.
#include <cstdint>

#include "core/hd.h"

namespace packrat {

struct FastDivU31 {
  uint32_t d = 1, m = 1u << 31;
  int shift = 31;

  FastDivU31() = default;
  explicit FastDivU31(uint32_t divisor) : d(divisor) {
    int l = 0;
    while ((uint64_t{1} << l) < divisor) ++l;
    const uint64_t p = uint64_t{1} << (31 + l);
    m = static_cast<uint32_t>((p + divisor - 1) / divisor);
    shift = 31 + l;
  }
  // x / d, x < 2^31.
  PACKRAT_HD uint32_t div(uint32_t x) const { return static_cast<uint32_t>((static_cast<uint64_t>(x) * m) >> shift); }
};

}  // namespace packrat
