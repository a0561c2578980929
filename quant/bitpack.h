#pragma once
// Bit packing of small unsigned codes, 1 to 8 bits per element, little-endian within a byte
// stream: element i occupies bits [i*b, (i+1)*b) of the stream. 3 bits: 8 elements in 3 bytes.
// The per-element helpers are inline and host/device so CPU loops and CUDA kernels share them.
#include <cstddef>
#include <cstdint>

#include "core/philox.h"  // PACKRAT_HD

namespace packrat {

// Bytes needed for n codes of b bits.
PACKRAT_HD constexpr int64_t packed_bytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

// Packs n codes (each < 2^bits) into dst (packed_bytes(n, bits) bytes, all written).
void pack_bits(const uint8_t* codes, int64_t n, int bits, uint8_t* dst);
// Unpacks n codes from src.
void unpack_bits(const uint8_t* src, int64_t n, int bits, uint8_t* codes);

}  // namespace packrat
