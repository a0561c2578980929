#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"

using namespace packrat;

// Known-answer test from the Random123 distribution (kat_vectors: philox4x32 10 rounds).
TEST(Philox, MatchesRandom123KnownAnswers) {
  uint32_t out[4];
  Philox4x32::generate(0, 0, 0, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(Philox, TwoCallsSideBySideAreTheTwoCalls) {
  for (const uint64_t counter : {uint64_t{0}, uint64_t{15}, uint64_t{1} << 40, ~uint64_t{0} - 1}) {
    uint32_t a[4], b[4], want_a[4], want_b[4];
    Philox4x32::generate2(0xC0FFEEull, 0x1234'5678'9ABCull, counter, counter + 1, a, b);
    Philox4x32::generate(0xC0FFEEull, 0x1234'5678'9ABCull, counter, want_a);
    Philox4x32::generate(0xC0FFEEull, 0x1234'5678'9ABCull, counter + 1, want_b);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(a[j], want_a[j]) << "counter " << counter << ", word " << j;
      EXPECT_EQ(b[j], want_b[j]) << "counter " << counter + 1 << ", word " << j;
    }
  }
}

TEST(Philox, UniformMeanIsAHalf) {
  PhiloxStream s(42, 7);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) sum += s.uniform();
  EXPECT_NEAR(sum / n, 0.5, 4 * 0.2887 / std::sqrt(n));
}

TEST(Philox, StateRestoresTheSequence) {
  PhiloxStream a(1, 2);
  for (int i = 0; i < 5; ++i) a.next_u32();
  PhiloxStream b(9, 9);
  b.set_state(a.state());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}
