#pragma once
// Philox-4x32-10 counter-based generator (Salmon et al., SC'11). A draw is a pure function of
// (seed, stream, counter), so any element's random number can be recomputed on its own, in any
// order, on any device: that is what makes stochastic rounding reproducible and lets GACT
// re-draw one tensor's noise while all others stay fixed.
#include <array>
#include <cstdint>

#include "core/hd.h"

namespace packrat {

struct Philox4x32 {
  static constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

  // The high and low words of a * b. A GPU multiplies 32-bit halves (mul.hi and mul.lo): nvcc
  // kept the 64-bit product of the portable form in 64-bit registers through all ten rounds,
  // twice the instructions.
  PACKRAT_HD static inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__)
    hi = __umulhi(a, b);
    lo = a * b;
#else
    const uint64_t p = static_cast<uint64_t>(a) * b;
    hi = static_cast<uint32_t>(p >> 32);
    lo = static_cast<uint32_t>(p);
#endif
  }

  // Four independent 32-bit words for one (seed, stream, counter).
  PACKRAT_HD static inline void generate(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
    uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      uint32_t hi0, lo0, hi1, lo1;
      mul_hi_lo(kMul0, c0, hi0, lo0);
      mul_hi_lo(kMul1, c2, hi1, lo1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
  }

  // Uniform in [0, 1) from the top 24 bits of a word (exactly representable in f32).
  PACKRAT_HD static inline float to_uniform(uint32_t word) {
    return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
  }
};

// Convenience: a stream of uniforms/normals for initialisation and shuffling.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream, uint64_t counter = 0)
      : seed_(seed), stream_(stream), counter_(counter) {}
  uint32_t next_u32() {
    if (used_ == 4) {
      Philox4x32::generate(seed_, stream_, counter_++, buf_);
      used_ = 0;
    }
    return buf_[used_++];
  }
  float uniform() { return Philox4x32::to_uniform(next_u32()); }
  float normal();  // Box-Muller
  uint64_t below(uint64_t n) { return (static_cast<uint64_t>(next_u32()) * n) >> 32; }
  uint64_t counter() const { return counter_; }
  // State to checkpoint and restore: (seed, stream, counter, used words).
  std::array<uint64_t, 4> state() const { return {seed_, stream_, counter_, used_}; }
  void set_state(const std::array<uint64_t, 4>& s);

 private:
  uint64_t seed_, stream_, counter_;
  uint32_t buf_[4] = {};
  uint32_t used_ = 4;
};

}  // namespace packrat
