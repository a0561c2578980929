#pragma once
// The quantizers' rounding noise: 32-bit words, word n of a (seed, stream) pair a keyed integer
// hash of n. Like Philox (core/philox.h, which dropout masks and initialisation keep), a word is a
// pure function of (seed, stream, n): any element's noise can be recomputed on its own, in any
// order, on any device, so stochastic rounding is reproducible, the CPU and CUDA kernels draw the
// same noise, and GACT re-draws one tensor's noise while all others stay fixed.
//
// Why not Philox-4x32-10 here: its ten rounds of two 32x32 -> 64-bit products for four words were
// about 40% of the stochastic quantize on the CPU (the noise, not the codec, held the 2-bit
// EfficientNet's step at 0.82x of its FP32-store twin on an AVX2 EPYC). This hash takes three
// 32-bit multiplies a word, which a SIMD unit does lane by lane with no widening.
//
// The hash is Wellons' triple32 (the 32-bit integer hash of least avalanche bias his hash
// prospector found: xorshift, multiply, three times, then a last xorshift), with the stream's three
// key words xored in before each multiply and the high half of n with the second. For one key and
// one high half it is a bijection of the low half: a stream's words never repeat within 2^32.
// The keys come from splitmix64 of the seed and the stream, so two streams differ in all three.
// tests/core/noise_hash_test.cpp checks the words' statistics (bit balance, uniformity of the
// 16-bit halves the quantizers use, no correlation between neighbours, streams or seeds).
#include <cstdint>

#include "core/hd.h"

namespace packrat {

// splitmix64's output function of z + the golden-ratio increment (Steele, Lea, Flood 2014).
PACKRAT_HD constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of one noise stream.
struct NoiseKey {
  uint32_t k0, k1, k2;
};
PACKRAT_HD constexpr NoiseKey noise_key(uint64_t seed, uint64_t stream) {
  const uint64_t a = splitmix64(seed ^ splitmix64(stream)), b = splitmix64(a);
  return {static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b)};
}

// Word (hi, lo) of the keyed stream, lane by lane: W is uint32_t, or a GCC vector of uint32_t
// (core/cpu/noise_hash_simd.h), whose operators work lane-wise with the same wrap-around.
template <class W>
PACKRAT_HD inline W noise_hash(const NoiseKey& key, W lo, W hi) {
  W x = lo ^ key.k0;
  x ^= x >> 17;
  x *= 0xED5AD4BBu;
  x ^= hi ^ key.k1;
  x ^= x >> 11;
  x *= 0xAC4C1B51u;
  x ^= key.k2;
  x ^= x >> 15;
  x *= 0x31848BABu;
  return x ^ (x >> 14);
}

// Word n of the keyed stream.
PACKRAT_HD inline uint32_t noise_word(const NoiseKey& key, uint64_t n) {
  return noise_hash<uint32_t>(key, static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32));
}
// The 16-bit noise of element e: half e % 2 of word e / 2 (the low half for even e). A word is two
// neighbours' noise, so a run of elements takes one hash per two, stored as they come out, and
// any walk of a buffer (a plane a SIMD lane, a block of 8 a CUDA thread) computes its own
// elements' words with no exchange between lanes.
PACKRAT_HD inline uint32_t noise_half(const NoiseKey& key, uint64_t e) {
  return (noise_word(key, e >> 1) >> (16 * (e & 1))) & 0xFFFFu;
}
// The noise of the 8 elements 8 block + k, k < 8: words 4 block .. 4 block + 3, halves in order.
PACKRAT_HD inline void block8_noise(const NoiseKey& key, uint64_t block, uint32_t half[8]) {
  for (int j = 0; j < 4; ++j) {
    const uint32_t w = noise_word(key, 4 * block + static_cast<uint64_t>(j));
    half[2 * j] = w & 0xFFFFu;
    half[2 * j + 1] = w >> 16;
  }
}

}  // namespace packrat
