#pragma once
// Bit packing of small unsigned codes, 1 to 8 bits per element, little-endian within a byte
// stream: element i occupies bits [i*b, (i+1)*b) of the stream. 3 bits: 8 elements in 3 bytes.
// The per-element helpers are inline and PACKRAT_HD so CPU loops and CUDA kernels share them;
// pack_bits / unpack_bits are the CPU kernels over them (bitpack_cpu.cpp), on host pointers.
#include <cstddef>
#include <cstdint>

#include "core/hd.h"

namespace packrat {

// Bytes needed for n codes of b bits.
PACKRAT_HD constexpr int64_t packed_bytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

// CPU kernels. Packs n codes (each < 2^bits) into dst (packed_bytes(n, bits) bytes, all written).
void pack_bits(const uint8_t* codes, int64_t n, int bits, uint8_t* dst);
// Unpacks n codes from src.
void unpack_bits(const uint8_t* src, int64_t n, int bits, uint8_t* codes);

// Per-block helpers. Eight codes of b bits fill exactly b bytes, so a stream is a sequence of
// b-byte blocks; a block is held in the low 8*b bits of a 64-bit word (little-endian).

// Loads the block of `bits` bytes at src (bytes beyond `avail` read as 0, for a tail).
PACKRAT_HD inline uint64_t load_block8(const uint8_t* src, int bits, int avail = 8) {
  uint64_t w = 0;
  const int nb = bits < avail ? bits : avail;
  for (int j = 0; j < nb; ++j) w |= static_cast<uint64_t>(src[j]) << (8 * j);
  return w;
}
// Stores the low `count` bytes of a block word at dst.
PACKRAT_HD inline void store_block8(uint64_t w, int count, uint8_t* dst) {
  for (int j = 0; j < count; ++j) dst[j] = static_cast<uint8_t>(w >> (8 * j));
}
// Code k (0..7) of a block word.
PACKRAT_HD inline uint32_t block_code(uint64_t w, int k, int bits) {
  return static_cast<uint32_t>(w >> (k * bits)) & ((1u << bits) - 1u);
}
// Places code c (< 2^bits) as code k of a block word.
PACKRAT_HD inline uint64_t block_put(uint32_t c, int k, int bits) { return static_cast<uint64_t>(c) << (k * bits); }

// Code of element i of a packed stream (reads only the bytes that hold it).
PACKRAT_HD inline uint32_t packed_code_at(const uint8_t* src, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int64_t byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  uint32_t w = src[byte];
  if (shift + bits > 8) w |= static_cast<uint32_t>(src[byte + 1]) << 8;
  return (w >> shift) & ((1u << bits) - 1u);
}

}  // namespace packrat
