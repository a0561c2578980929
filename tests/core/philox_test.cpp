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
