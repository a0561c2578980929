#pragma once
// The GPU work of packing masks and indices exactly (CompressingStore's Packed form, the few-bit
// store's mask loads), one block of 8 codes per index: the bodies the CUDA kernels
// (quant/cuda/bitpack_cuda.cu) run, CUDA-free so that the CPU tests run them too (run_on_host) against the CPU
// kernels, byte for byte; the CPU entry points run them for i32 / i64 codes. A block of 8 codes
// fills exactly `bits` bytes, so blocks are written independently (the last one may be partial).
#include <cstdint>

#include "quant/bits/bitpack.h"

namespace packrat {

// Where a pack notes an element that does not fit its bits: the smallest index noted.
struct HostFirstUnfit {
  int64_t* first;  // the caller sets it to -1 (none) or to an index past the end
  PACKRAT_HD void note(int64_t i) const {
    if (*first < 0 || i < *first) *first = i;
  }
};
// For a pack whose input was checked already.
struct IgnoreUnfit {
  PACKRAT_HD void note(int64_t) const {}
};

// Codes [8 * blk, 8 * blk + 8) (clipped to n) of the integers src (u8, i32 or i64) at `bits`
// (1..8) into the block's `bits` bytes at dst + blk * bits. A value outside [0, 2^bits) is noted
// to `unfit` (the first of its block only; its low bits are packed, and the caller discards codes
// with an unfit value).
template <typename T, class Unfit>
struct PackCodesBody {
  const T* src;  // (n)
  int64_t n;
  int bits;
  uint8_t* dst;  // (packed_bytes(n, bits))
  Unfit unfit;

  PACKRAT_HD void operator()(int64_t blk) const {
    const int64_t i0 = 8 * blk;
    const int count = n - i0 < 8 ? static_cast<int>(n - i0) : 8;
    const int64_t limit = int64_t{1} << bits;
    const uint32_t mask = (1u << bits) - 1u;
    bool noted = false;
    uint64_t w = 0;
    for (int k = 0; k < count; ++k) {
      const int64_t v = static_cast<int64_t>(src[i0 + k]);
      if ((v < 0 || v >= limit) && !noted) {
        unfit.note(i0 + k);
        noted = true;
      }
      w |= block_put(static_cast<uint32_t>(v) & mask, k, bits);
    }
    store_block8(w, static_cast<int>(packed_bytes(count, bits)), dst + blk * bits);
  }
};

// out[8 * blk ..] (clipped to n) = the block's codes, as T (u8, i32 or i64).
template <typename T>
struct UnpackCodesBody {
  const uint8_t* src;  // (packed_bytes(n, bits))
  int64_t n;
  int bits;
  T* out;  // (n)

  PACKRAT_HD void operator()(int64_t blk) const {
    const int64_t i0 = 8 * blk;
    const int count = n - i0 < 8 ? static_cast<int>(n - i0) : 8;
    const uint64_t w = load_block8(src + blk * bits, bits, static_cast<int>(packed_bytes(count, bits)));
    for (int k = 0; k < count; ++k) out[i0 + k] = static_cast<T>(block_code(w, k, bits));
  }
};

}  // namespace packrat
