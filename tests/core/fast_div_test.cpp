// FastDivU31: x / d by a multiply and a shift, for every x < 2^31: the edges of each quotient (x = q d
// - 1, q d) and random x, for small divisors, powers of two and their neighbours, and large ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/fast_div.h"

namespace packrat {
namespace {

TEST(FastDiv, DividesEveryValueBelow2To31LikeTheIntegerDivision) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (int k = 11; k < 31; ++k)
    for (int64_t delta : {-1, 0, 1}) divisors.push_back(static_cast<uint32_t>((int64_t{1} << k) + delta));
  for (uint32_t d : {3 * 3 * 7u, 49u, 196u, 784u, 3136u, 12544u, 100000007u, 2147483647u}) divisors.push_back(d);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> below_2_31(0, (1u << 31) - 1);
  for (uint32_t d : divisors) {
    const FastDivU31 by(d);
    auto check = [&](uint32_t x) { ASSERT_EQ(by.div(x), x / d) << x << " / " << d; };
    check(0);
    check((1u << 31) - 1);
    for (uint32_t q = 1; q < 64 && uint64_t{q} * d < (1u << 31); ++q) {
      check(q * d - 1);
      check(q * d);
    }
    const uint32_t last_q = ((1u << 31) - 1) / d;  // the edges of the largest quotients
    for (uint32_t q = last_q > 3 ? last_q - 3 : 1; q <= last_q; ++q) {
      check(q * d - 1);
      check(q * d);
    }
    for (int i = 0; i < 2000; ++i) check(below_2_31(rng));
  }
}

}  // namespace
}  // namespace packrat
