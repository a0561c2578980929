// Codes of 1 to 16 bits packed on a byte boundary: the store's masks and indices above 8 bits
// (max-pool indices of large windows) and the mixed quantizer's wide codes.
#pragma once
#include <cstdint>

namespace packrat {

inline constexpr int kMaxWideCodeBits = 16;

// Packs n codes of `bits` (1..16) bits, starting on a byte boundary, in this file's layout
// (bits <= 8: quant/bits/bitpack.h's; wider: n low bytes, then the high bits - 8 bits packed), which
// takes packed_bytes(n, bits) bytes; e.g. the Index requests of the store.
void pack_wide_codes(const uint16_t* codes, int64_t n, int bits, uint8_t* dst);
void unpack_wide_codes(const uint8_t* src, int64_t n, int bits, uint16_t* codes);

}  // namespace packrat
