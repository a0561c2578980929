#pragma once
// noise_hash (core/noise_hash.h) on SIMD lanes, as GCC vectors of uint32_t one register wide
// (AVX-512: 16 lanes, AVX2: 8, otherwise 4), whose operators the compiler lowers lane by lane:
// one source for every ISA, so the tests on any machine check the code every other runs. (Vectors
// wider than a register went through the stack on AVX2 at every broadcast: slower than Philox.)
// Used by the per-group and per-bucket quantizers' rounding noise (quant/cpu/group_quant_simd.h,
// quant/cpu/plane_tiles.h, quant/cpu/mixed_quant_cpu.cpp).
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/noise_hash.h"

namespace packrat::simd {

#if defined(__AVX512F__)
constexpr int kNoiseLanes = 16;
#elif defined(__AVX2__)
constexpr int kNoiseLanes = 8;
#else
constexpr int kNoiseLanes = 4;
#endif
using NoiseLanes = uint32_t __attribute__((vector_size(4 * kNoiseLanes)));       // (lanes,) one register

// Lanes 0, 1, ..., kNoiseLanes - 1.
inline NoiseLanes noise_lane_index() {
  NoiseLanes v;
  for (int l = 0; l < kNoiseLanes; ++l) v[l] = static_cast<uint32_t>(l);
  return v;
}

// rounding_noise16 (quant/group/group_quant.h) of the 128 elements of noise block `block`, the
// plain order's runs of 128: words 64 block + [0, 64), each two elements' 16 bits, stored as they
// come out (a word's low half first: the elements' order on a little-endian machine).
static_assert(std::endian::native == std::endian::little, "noise_block16 stores words as pairs of halves");
inline void noise_block16(const NoiseKey& key, int64_t block, uint16_t* out) {
  const uint64_t n0 = static_cast<uint64_t>(block) << 6;  // a multiple of 64: the block's words share their high half
  const NoiseLanes hi = NoiseLanes{} + static_cast<uint32_t>(n0 >> 32);
  const NoiseLanes lanes = noise_lane_index() + static_cast<uint32_t>(n0);
  for (int k = 0; k < 64; k += kNoiseLanes) {
    const NoiseLanes w = noise_hash(key, lanes + static_cast<uint32_t>(k), hi);
    std::memcpy(out + 2 * k, &w, sizeof w);
  }
}

}  // namespace packrat::simd
