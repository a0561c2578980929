// The quantizers' rounding noise words (core/noise_hash.h): the SIMD lanes are the scalar hash,
// and the words behave as independent uniform bits where stochastic rounding reads them (16-bit
// halves of consecutive words, of neighbouring streams and of neighbouring seeds).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu/noise_hash_simd.h"
#include "core/noise_hash.h"

namespace packrat {
namespace {

// Fixed values: the noise of a seed is part of a run's reproducibility (a resumed run draws the
// words the first run drew), so a change to the hash must be a decision, not an accident.
TEST(NoiseHash, KnownWords) {
  const NoiseKey key = noise_key(0, 0);
  EXPECT_EQ(key.k0, 0x4D197E6Fu);
  EXPECT_EQ(key.k1, 0xA706DD2Fu);
  EXPECT_EQ(key.k2, 0x38FCBE91u);
  EXPECT_EQ(noise_word(key, 0), 0x7D89114Du);
  EXPECT_EQ(noise_word(key, 6), 0x6252A407u);
  EXPECT_EQ(noise_word(key, (uint64_t{1} << 32) + 3), 0xFCC63543u);  // the index's high half 1
  EXPECT_EQ(noise_word(key, 0), noise_hash<uint32_t>(key, 0u, 0u));
  EXPECT_EQ(noise_word(key, 6), noise_hash<uint32_t>(key, 6u, 0u));
  EXPECT_EQ(noise_word(key, (uint64_t{1} << 32) + 3), noise_hash<uint32_t>(key, 3u, 1u));
  // element e: half e % 2 of word e / 2
  EXPECT_EQ(noise_half(key, 0), 0x114Du);
  EXPECT_EQ(noise_half(key, 1), 0x7D89u);
  EXPECT_EQ(noise_half(key, 13), 0x6252u);
  const NoiseKey step3 = noise_key(0x5EED, (uint64_t{3} << 20) ^ 1);  // quant_stream(3, 1)
  EXPECT_EQ(noise_word(step3, 0), 0xDB8E6784u);
  EXPECT_EQ(noise_word(step3, 4 * 12345 + 1), 0x693EBB01u);
  // splitmix64's first outputs from 0 and 1 (Vigna's reference implementation).
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  const uint32_t words[3] = {noise_word(noise_key(1, 2), 0), noise_word(noise_key(1, 2), 1),
                             noise_word(noise_key(2, 1), 0)};
  EXPECT_NE(words[0], words[1]);
  EXPECT_NE(words[0], words[2]);
}

// A block of 128 values made a register of words at a time is the scalar noise element by element
// (the words' halves in the elements' order), across the high half of the word index.
TEST(NoiseHash, BlockLanesAreTheScalarHalves) {
  const NoiseKey key = noise_key(0x1234567890ull, 0xABCDEF01234ull);
  for (const int64_t block : {int64_t{0}, int64_t{7}, (int64_t{1} << 26) - 1, int64_t{1} << 26, (int64_t{1} << 40) + 3}) {
    uint16_t got[128];
    simd::noise_block16(key, block, got);
    for (int i = 0; i < 128; ++i)
      ASSERT_EQ(got[i], noise_half(key, 128 * static_cast<uint64_t>(block) + static_cast<uint64_t>(i)))
          << "block " << block << " element " << i;
  }
}

// The statistics of n 16-bit noise values: mean and variance of the uniforms (h + 0.5) / 2^16,
// a chi-square over 256 bins of their top 8 bits, and the correlation of each with the next.
struct HalfStats {
  double mean = 0, var = 0, chi2 = 0, lag1 = 0;
};
HalfStats half_stats(const std::vector<uint32_t>& halves) {
  const double n = static_cast<double>(halves.size());
  std::vector<double> bins(256, 0.0);
  double sum = 0, sum2 = 0, lag = 0;
  for (size_t i = 0; i < halves.size(); ++i) {
    const double u = (halves[i] + 0.5) / 65536.0;
    sum += u;
    sum2 += u * u;
    if (i + 1 < halves.size()) lag += (u - 0.5) * ((halves[i + 1] + 0.5) / 65536.0 - 0.5);
    bins[halves[i] >> 8] += 1;
  }
  HalfStats s;
  s.mean = sum / n;
  s.var = sum2 / n - s.mean * s.mean;
  const double expected = n / 256;
  for (const double b : bins) s.chi2 += (b - expected) * (b - expected) / expected;
  s.lag1 = lag / (n - 1) / (1.0 / 12);
  return s;
}

// The noise of 2^21 consecutive elements of one stream (2^20 words' halves, in the elements' order):
// mean 1/2 and variance 1/12 within 5 standard errors, the 256-bin chi-square (255 degrees of
// freedom, sd 22.6) below 255 + 5 sd, neighbours (a word's two halves, and the high half of one
// word with the low half of the next) uncorrelated within 5 standard errors (1/sqrt(n)).
TEST(NoiseHash, HalvesOfAStreamAreUniformAndUncorrelated) {
  const NoiseKey key = noise_key(7, (uint64_t{3} << 20) ^ 41);  // quant_stream(3, 41)
  const size_t elements = size_t{1} << 21;
  std::vector<uint32_t> halves(elements);
  for (size_t e = 0; e < elements; ++e) halves[e] = noise_half(key, e);
  const HalfStats s = half_stats(halves);
  const double n = static_cast<double>(halves.size());
  EXPECT_NEAR(s.mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(s.var, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
  EXPECT_LT(s.chi2, 255 + 5 * 22.6);
  EXPECT_NEAR(s.lag1, 0.0, 5 / std::sqrt(n));
}

// Every bit of the word is a fair coin over consecutive counters, and the bits of one word do not
// follow its index's bits: for each output bit, the fraction of ones, and its agreement with each
// of the index's low 8 bits, within 5 standard errors of 1/2.
TEST(NoiseHash, BitsAreFairAndIndependentOfTheIndex) {
  const NoiseKey key = noise_key(0, 1);
  const uint32_t n = 1u << 18;
  double ones[32] = {}, agree[32][8] = {};
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t w = noise_hash<uint32_t>(key, i, 0u);
    for (int b = 0; b < 32; ++b) {
      const uint32_t bit = (w >> b) & 1u;
      ones[b] += bit;
      for (int k = 0; k < 8; ++k) agree[b][k] += bit == ((i >> k) & 1u) ? 1 : 0;
    }
  }
  const double tol = 5 * 0.5 / std::sqrt(static_cast<double>(n));
  for (int b = 0; b < 32; ++b) {
    EXPECT_NEAR(ones[b] / n, 0.5, tol) << "bit " << b;
    for (int k = 0; k < 8; ++k) EXPECT_NEAR(agree[b][k] / n, 0.5, tol) << "bit " << b << " against index bit " << k;
  }
}

// The same element's noise in neighbouring streams (the next saved tensor of a step, the same
// tensor a step later) and under neighbouring seeds is uncorrelated.
TEST(NoiseHash, NeighbouringStreamsAndSeedsAreUncorrelated) {
  const uint64_t stream = (uint64_t{5} << 20) ^ 9;
  const struct {
    const char* what;
    NoiseKey other;
  } pairs[] = {{"the next tensor", noise_key(1, stream + 1)},
               {"the next step", noise_key(1, stream + (uint64_t{1} << 20))},
               {"the next seed", noise_key(2, stream)}};
  const NoiseKey key = noise_key(1, stream);
  const int n = 1 << 20;
  for (const auto& p : pairs) {
    double sum = 0;
    int equal = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t a = noise_hash<uint32_t>(key, static_cast<uint32_t>(i), 0u);
      const uint32_t b = noise_hash<uint32_t>(p.other, static_cast<uint32_t>(i), 0u);
      sum += ((a >> 16) / 65536.0 - 0.5) * ((b >> 16) / 65536.0 - 0.5) + ((a & 0xFFFFu) / 65536.0 - 0.5) *
                                                                            ((b & 0xFFFFu) / 65536.0 - 0.5);
      equal += a == b ? 1 : 0;
    }
    const double corr = sum / (2.0 * n) / (1.0 / 12);
    EXPECT_NEAR(corr, 0.0, 5 / std::sqrt(2.0 * n)) << p.what;
    EXPECT_LE(equal, 2) << p.what << ": words equal at the same index";
  }
}

}  // namespace
}  // namespace packrat
