#pragma once
// The Philox words of one dropout block on SIMD lanes (core/philox_maps.h, DropoutPhilox: block b
// is counters [64 b, 64 b + 64), whose four words decide its 256 elements), shared by dropout's
// masks (cpu_backend_random.cpp) and the memory-efficient attention's, which draws the same mask
// for its probabilities tile by tile (cpu_backend_attention.cpp). Internal to the CPU kernels: it
// includes immintrin.h.
#include <cstdint>
#include <cstring>

#include "core/cpu/philox_simd.h"
#include "core/philox_maps.h"

namespace packrat::cpu {

// The four words of counters [counter0, counter0 + 64), word-major: w[k][j]; the same numbers
// as Philox4x32::generate (checked by the tests). 32 counters at a time with AVX-512 and AVX2, 16
// otherwise, in SIMD lanes (core/cpu/philox_simd.h): GCC's vectorisation of the scalar rounds
// held a word in a 64-bit lane and shuffled them back, and dropout was 6.8% of the BERT-tiny
// FP32 step (perf). counter0 is a multiple of 64.
inline void dropout_block_words(uint64_t seed, uint64_t stream, uint64_t counter0,
                                uint32_t (&w)[4][DropoutPhilox::kLanes]) {
  constexpr int64_t kLanes = DropoutPhilox::kLanes;
#if defined(__AVX512F__)
  for (int64_t q = 0; q < kLanes; q += 32) {  // two blocks of 16 counters, their chains interleaved
    __m512i words[4][4];  // (4 words, 32 counters in 64-bit lanes)
    simd::philox_blocks<2>(seed, stream, counter0 + static_cast<uint64_t>(q), words);
    for (int k = 0; k < 4; ++k)
      for (int b = 0; b < 2; ++b)
        _mm512_storeu_si512(&w[k][q + 16 * b], simd::low_words(words[k][2 * b], words[k][2 * b + 1]));
  }
#elif defined(__AVX2__)
  for (int64_t q = 0; q < kLanes; q += 32) {  // two blocks of 16 counters, their chains interleaved
    alignas(64) uint32_t words[128];  // (2 blocks, 4 words, 16 lanes)
    simd::philox_lanes<2>(seed, stream, counter0 + static_cast<uint64_t>(q), words);
    for (int b = 0; b < 2; ++b)
      for (int k = 0; k < 4; ++k) std::memcpy(&w[k][q + 16 * b], words + 64 * b + 16 * k, 16 * sizeof(uint32_t));
  }
#else
  for (int64_t q = 0; q < kLanes; q += 16) {  // counter0 + q + lane never carries
    alignas(64) uint32_t words[64];  // (4 words, 16 lanes)
    simd::philox_lanes16(seed, stream, counter0 + static_cast<uint64_t>(q), words);
    for (int k = 0; k < 4; ++k) std::memcpy(&w[k][q], words + 16 * k, 16 * sizeof(uint32_t));
  }
#endif
}

}  // namespace packrat::cpu
