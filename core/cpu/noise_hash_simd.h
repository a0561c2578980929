#pragma once
// noise_hash (core/noise_hash.h) on SIMD lanes, as GCC vectors of uint32_t one register wide
// (AVX-512: 16 lanes, AVX2: 8, otherwise 4), whose operators the compiler lowers lane by lane:
// one source for every ISA, so the tests on any machine check the code every other runs. (Vectors
// wider than a register went through the stack on AVX2 at every broadcast: slower than Philox.)
// Used by the per-group and per-bucket quantizers' rounding noise (quant/cpu/group_quant_simd.h,
// quant/cpu/plane_tiles.h, quant/cpu/mixed_quant_cpu.cpp).
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && !defined(__AVX512F__)
#include <immintrin.h>
#endif

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
using NoiseHalves = uint16_t __attribute__((vector_size(2 * kNoiseLanes)));      // (lanes,) 16 bits each

// Lanes 0, 1, ..., kNoiseLanes - 1.
inline NoiseLanes noise_lane_index() {
  NoiseLanes v;
  for (int l = 0; l < kNoiseLanes; ++l) v[l] = static_cast<uint32_t>(l);
  return v;
}

// out[16 j + l] = noise_word(key, counter0 + l, j), l < 16, for counter0 % 16 == 0: the 64 words
// 4 counter0 + [0, 64), which share their high half (Philox4x32's lanes' layout, philox_lanes16).
inline void noise_words16(const NoiseKey& key, uint64_t counter0, uint32_t* out) {
  const uint64_t n0 = counter0 << 2;
  const NoiseLanes hi = NoiseLanes{} + static_cast<uint32_t>(n0 >> 32);
  const NoiseLanes lane4 = noise_lane_index() * 4u + static_cast<uint32_t>(n0);
  for (int l0 = 0; l0 < 16; l0 += kNoiseLanes)
    for (int j = 0; j < 4; ++j) {
      const NoiseLanes w = noise_hash(key, lane4 + static_cast<uint32_t>(4 * l0 + j), hi);
      std::memcpy(out + 16 * j + l0, &w, sizeof w);
    }
}

// rounding_noise16 (quant/group/group_quant.h) of the 128 elements of noise block `block`:
// element 16 h + l takes half h % 2 of word h / 2 of counter 16 block + l, so word j's low halves
// are elements 32 j + [0, 16) and its high halves the 16 after them.
inline void noise_block16(const NoiseKey& key, int64_t block, uint16_t* out) {
  const uint64_t n0 = static_cast<uint64_t>(block) << 6;
  const NoiseLanes hi = NoiseLanes{} + static_cast<uint32_t>(n0 >> 32);
  const NoiseLanes lane4 = noise_lane_index() * 4u + static_cast<uint32_t>(n0);
#if defined(__AVX2__) && !defined(__AVX512F__)
  // Two registers of 8 lanes a word: their low halves and their high halves each one pack (which
  // interleaves 128-bit lanes, put back in order by a permute), 4 instructions for 16 halves
  // against GCC's 6 for __builtin_convertvector's two conversions.
  for (int j = 0; j < 4; ++j) {
    const __m256i a = reinterpret_cast<__m256i>(noise_hash(key, lane4 + static_cast<uint32_t>(j), hi));
    const __m256i b = reinterpret_cast<__m256i>(noise_hash(key, lane4 + static_cast<uint32_t>(32 + j), hi));
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    const __m256i low = _mm256_packus_epi32(_mm256_and_si256(a, lo16), _mm256_and_si256(b, lo16));
    const __m256i high = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * j), _mm256_permute4x64_epi64(low, 0xD8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * j + 16), _mm256_permute4x64_epi64(high, 0xD8));
  }
#else
  for (int l0 = 0; l0 < 16; l0 += kNoiseLanes)
    for (int j = 0; j < 4; ++j) {
      const NoiseLanes w = noise_hash(key, lane4 + static_cast<uint32_t>(4 * l0 + j), hi);
      const NoiseHalves low = __builtin_convertvector(w & 0xFFFFu, NoiseHalves);
      const NoiseHalves high = __builtin_convertvector(w >> 16, NoiseHalves);
      std::memcpy(out + 32 * j + l0, &low, sizeof low);
      std::memcpy(out + 32 * j + 16 + l0, &high, sizeof high);
    }
#endif
}

}  // namespace packrat::simd
