#include "quant/bits/wide_codes.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "quant/bits/bitpack.h"

namespace packrat {

void pack_wide_codes(const uint16_t* codes, int64_t n, int bits, uint8_t* dst) {
  PACKRAT_CHECK(bits >= 1 && bits <= kMaxWideCodeBits, "pack_wide_codes: bits must be in [1, {}], got {}", kMaxWideCodeBits, bits);
  std::vector<uint8_t> part(static_cast<size_t>(n));  // (n,) one byte of every code
  const int low_bits = std::min(bits, 8);
  for (int64_t i = 0; i < n; ++i) part[static_cast<size_t>(i)] = static_cast<uint8_t>(codes[i]);
  pack_bits(part.data(), n, low_bits, dst);
  if (bits <= 8) return;
  for (int64_t i = 0; i < n; ++i) part[static_cast<size_t>(i)] = static_cast<uint8_t>(codes[i] >> 8);
  pack_bits(part.data(), n, bits - 8, dst + n);
}

void unpack_wide_codes(const uint8_t* src, int64_t n, int bits, uint16_t* codes) {
  PACKRAT_CHECK(bits >= 1 && bits <= kMaxWideCodeBits, "unpack_wide_codes: bits must be in [1, {}], got {}", kMaxWideCodeBits,
                bits);
  std::vector<uint8_t> part(static_cast<size_t>(n));  // (n,) one byte of every code
  unpack_bits(src, n, std::min(bits, 8), part.data());
  for (int64_t i = 0; i < n; ++i) codes[i] = part[static_cast<size_t>(i)];
  if (bits <= 8) return;
  unpack_bits(src + n, n, bits - 8, part.data());
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint16_t>(codes[i] | (part[static_cast<size_t>(i)] << 8));
}

}  // namespace packrat
