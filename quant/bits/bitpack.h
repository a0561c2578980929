#pragma once
// Bit packing of small unsigned codes, 1 to 8 bits per element, little-endian within a byte
// stream: element i occupies bits [i*b, (i+1)*b) of the stream. 3 bits: 8 elements in 3 bytes.
// The per-element helpers are inline and PACKRAT_HD so CPU loops and CUDA kernels share them;
// pack_bits / unpack_bits are the CPU kernels over them (quant/cpu/bitpack_cpu.cpp), on host pointers;
// pack_codes / unpack_codes the Tensor entry points, dispatched by device (bitpack.cpp; the CUDA
// kernels run the bodies of bitpack_device.h).
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

// Entry points, on the device of their tensors (CPU: the kernels above; GPU: quant/cuda/bitpack_cuda.cu).
class Tensor;
// Packs the integers of src (u8, i32 or i64, any shape, the buffer as it lies) at `bits` (1..8)
// into packed ((packed_bytes(numel, bits),) u8, on src's device). Returns the index of the first
// element outside [0, 2^bits), or -1 when every element fits (only then are the codes exact). On
// a GPU one pass writes the codes and the flag, which is read back once (one synchronisation).
int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed);
// Unpacks out.numel() codes of `bits` bits into out (u8, i32 or i64, on packed's device).
void unpack_codes(const Tensor& packed, int bits, const Tensor& out);

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
