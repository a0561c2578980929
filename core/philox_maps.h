#pragma once
// How Philox words become dropout masks and initial values, per element: written once (PACKRAT_HD)
// so that the CPU loops and the CUDA kernels map the same words to the same elements, and a
// mask drawn on one device is bit-identical to the other's.
#include <cmath>
#include <cstdint>

#include "core/hd.h"
#include "core/philox.h"

namespace packrat {

// Dropout: element i = 256 b + r (block b, r = 64 k + j) keeps where word k = r / 64 of
// Philox(seed, stream, counter 64 b + j) is >= p. So counter c feeds elements
// 256 (c / 64) + 64 k + c % 64, k = 0..3: 64 consecutive counters cover 256 consecutive elements
// (the CPU vectorises over the 64 lanes; a GPU thread per counter writes coalesced rows).
struct DropoutPhilox {
  static constexpr int64_t kLanes = 64;          // Philox counters per dropout block
  static constexpr int64_t kBlock = 4 * kLanes;  // elements per dropout block
  // The element that word `word` of counter `counter` decides.
  PACKRAT_HD static int64_t element(uint64_t counter, int word) {
    return static_cast<int64_t>(counter / kLanes) * kBlock + word * kLanes + static_cast<int64_t>(counter % kLanes);
  }
  // The counter and the word of it that decide element e (the inverse of element()).
  PACKRAT_HD static uint64_t counter_of(int64_t e) {
    return static_cast<uint64_t>(e / kBlock) * kLanes + static_cast<uint64_t>(e % kLanes);
  }
  PACKRAT_HD static int word_of(int64_t e) { return static_cast<int>((e % kBlock) / kLanes); }
  // The counters that cover n elements (whole blocks).
  PACKRAT_HD static int64_t counters(int64_t n) { return (n + kBlock - 1) / kBlock * kLanes; }
  PACKRAT_HD static bool keep(uint32_t word, float p) { return Philox4x32::to_uniform(word) >= p; }
};

// Init fills: block b (4 values, elements 4 b .. 4 b + 3) from the words of counter + b.
PACKRAT_HD inline int64_t fill_blocks_for(int64_t n) { return (n + 3) / 4; }

// Uniform in [lo, hi).
PACKRAT_HD inline void uniform_block(const uint32_t w[4], float lo, float hi, float v[4]) {
  for (int k = 0; k < 4; ++k) v[k] = lo + (hi - lo) * Philox4x32::to_uniform(w[k]);
}

// normal(mean, std) by Box-Muller on the word pairs (0, 1) and (2, 3). std::log / sqrt / cos /
// sin: the device's own math library on a GPU (within 2 ulp of the host's), so normal values
// agree across devices to f32 rounding, not bit for bit (uniforms and dropout masks do).
PACKRAT_HD inline void normal_block(const uint32_t w[4], float mean, float std, float v[4]) {
  for (int k = 0; k < 4; k += 2) {
    const float u = Philox4x32::to_uniform(w[k]);
    const float u1 = u > 1e-7f ? u : 1e-7f, u2 = Philox4x32::to_uniform(w[k + 1]);
    const float r = std::sqrt(-2.0f * std::log(u1)), a = 6.28318530717958647f * u2;
    v[k] = mean + std * r * std::cos(a);
    v[k + 1] = mean + std * r * std::sin(a);
  }
}

}  // namespace packrat
