#pragma once
// Loads and stores of packed code bytes (and, from core/cuda/kernels/float_io.h, of short runs of
// floats), as wide as their address allows on a GPU (one 2-, 4- or 8-byte access for a block's bytes) and
// element by element on the host: the same bytes either way (both are little-endian), so the
// host tests of the kernels' bodies check what a GPU writes. The alignment is checked at run
// time: groups, and with them their codes, start anywhere.
#include <cstdint>

#include "core/cuda/kernels/float_io.h"  // load_floats4 / load_floats8 / store_floats4
#include "core/hd.h"
#include "quant/bits/bitpack.h"

namespace packrat {

// The low `count` (0..8) bytes of w at dst.
PACKRAT_HD inline void store_bytes_wide(uint64_t w, int count, uint8_t* dst) {
#if defined(__CUDA_ARCH__)
  const auto a = reinterpret_cast<uintptr_t>(dst);
  if (count == 8 && a % 8 == 0) {
    *reinterpret_cast<uint64_t*>(dst) = w;
    return;
  }
  if (count == 4 && a % 4 == 0) {
    *reinterpret_cast<uint32_t*>(dst) = static_cast<uint32_t>(w);
    return;
  }
  if (count == 2 && a % 2 == 0) {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(w);
    return;
  }
#endif
  for (int j = 0; j < 8; ++j)  // a constant trip count: unrolled, nothing in local memory
    if (j < count) dst[j] = static_cast<uint8_t>(w >> (8 * j));
}

// `count` (0..8) bytes from src, in the low bytes of the result (the rest 0).
PACKRAT_HD inline uint64_t load_bytes_wide(const uint8_t* src, int count) {
#if defined(__CUDA_ARCH__)
  const auto a = reinterpret_cast<uintptr_t>(src);
  if (count == 8 && a % 8 == 0) return *reinterpret_cast<const uint64_t*>(src);
  if (count == 4 && a % 4 == 0) return *reinterpret_cast<const uint32_t*>(src);
  if (count == 2 && a % 2 == 0) return *reinterpret_cast<const uint16_t*>(src);
#endif
  uint64_t w = 0;
  for (int j = 0; j < 8; ++j)
    if (j < count) w |= static_cast<uint64_t>(src[j]) << (8 * j);
  return w;
}

// The codes of quad q (elements 4q .. 4q + 3, clipped to len) of a packed stream of len codes
// (a group's, or a whole tensor's; quant/bits/bitpack.h's layout), code k at bits [k bits, (k + 1) bits)
// of the result; no byte past the stream is read.
PACKRAT_HD inline uint32_t load_quad_codes(const uint8_t* codes, int64_t len, int64_t q, int bits) {
  const int64_t bit = 4 * q * bits, byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  const int64_t avail = packed_bytes(len, bits) - byte;
  const int want = (shift + 4 * bits + 7) >> 3;
  const int count = want < avail ? want : static_cast<int>(avail);
  return static_cast<uint32_t>(load_bytes_wide(codes + byte, count) >> shift);
}

}  // namespace packrat
