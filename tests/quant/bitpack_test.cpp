#include "quant/bits/bitpack.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace packrat {
namespace {

std::vector<uint8_t> random_codes(int64_t n, int bits, uint64_t seed) {
  PhiloxStream s(seed, static_cast<uint64_t>(bits));
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (auto& v : c) v = static_cast<uint8_t>(s.below(1u << bits));
  return c;
}

// The format, written bit by bit: element i occupies bits [i*b, (i+1)*b) of the stream.
std::vector<uint8_t> reference_pack(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint8_t> out(static_cast<size_t>(packed_bytes(static_cast<int64_t>(codes.size()), bits)), 0);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int j = 0; j < bits; ++j)
      if ((codes[i] >> j) & 1) {
        const size_t bit = i * bits + j;
        out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
  return out;
}

TEST(BitPack, PackedBytes) {
  EXPECT_EQ(packed_bytes(0, 3), 0);
  EXPECT_EQ(packed_bytes(8, 3), 3);
  EXPECT_EQ(packed_bytes(9, 3), 4);
  EXPECT_EQ(packed_bytes(1, 1), 1);
  EXPECT_EQ(packed_bytes(17, 4), 9);
}

TEST(BitPack, RoundTripAllWidthsAndTails) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (int64_t n = 0; n <= 67; ++n) {
      auto codes = random_codes(n, bits, 100 + static_cast<uint64_t>(n));
      const int64_t nb = packed_bytes(n, bits);
      // Guard bytes after the packed data must stay untouched.
      std::vector<uint8_t> packed(static_cast<size_t>(nb) + 4, 0xAB);
      pack_bits(codes.data(), n, bits, packed.data());
      for (int g = 0; g < 4; ++g) ASSERT_EQ(packed[static_cast<size_t>(nb + g)], 0xAB) << bits << " bits n=" << n;
      packed.resize(static_cast<size_t>(nb));
      ASSERT_EQ(packed, reference_pack(codes, bits)) << bits << " bits n=" << n;
      std::vector<uint8_t> back(static_cast<size_t>(n) + 3, 0xCD);
      unpack_bits(packed.data(), n, bits, back.data());
      for (int g = 0; g < 3; ++g) ASSERT_EQ(back[static_cast<size_t>(n + g)], 0xCD);
      back.resize(static_cast<size_t>(n));
      ASSERT_EQ(back, codes) << bits << " bits n=" << n;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(packed_code_at(packed.data(), i, bits), codes[static_cast<size_t>(i)]);
    }
  }
}

TEST(BitPack, ThreeBitsIsEightCodesInThreeBytes) {
  std::vector<uint8_t> codes = {1, 2, 3, 4, 5, 6, 7, 0};
  std::vector<uint8_t> packed(3);
  pack_bits(codes.data(), 8, 3, packed.data());
  // 0b000'111'110'101'100'011'010'001 little-endian
  const uint32_t w = packed[0] | (packed[1] << 8) | (packed[2] << 16);
  EXPECT_EQ(w, 0b000111110101100011010001u);
}

TEST(BitPack, LargeParallelRoundTrip) {
  for (int bits : {1, 2, 3, 4}) {
    const int64_t n = 300007;  // several thread chunks and a tail
    auto codes = random_codes(n, bits, 7);
    std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n, bits)));
    pack_bits(codes.data(), n, bits, packed.data());
    ASSERT_EQ(packed, reference_pack(codes, bits));
    std::vector<uint8_t> back(static_cast<size_t>(n));
    unpack_bits(packed.data(), n, bits, back.data());
    ASSERT_EQ(back, codes);
  }
}

TEST(BitPack, RejectsBadWidth) {
  uint8_t c = 0, d = 0;
  EXPECT_THROW(pack_bits(&c, 1, 0, &d), Error);
  EXPECT_THROW(pack_bits(&c, 1, 9, &d), Error);
  EXPECT_THROW(unpack_bits(&c, 1, 0, &d), Error);
}

}  // namespace
}  // namespace packrat
