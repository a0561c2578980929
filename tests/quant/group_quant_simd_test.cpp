// The CPU kernels' SIMD building blocks (quant/cpu/group_quant_simd.h) against their plain forms, on
// whatever this machine has (AVX-512, AVX2 or neither): the same bytes as the reference and a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "quant/bits/bitpack.h"
#include "quant/cpu/group_quant_simd.h"

namespace packrat {
namespace {

// A group's (min, max) is the plain scan's, bit for bit: a NaN first value kept, later NaNs skipped
// (in any lane: at element 16 a lane's first), a zero extreme with the sign of the first zero met
// (one zero per lane of the other sign first: lanes would disagree), over groups of 1 to 300.
TEST(GroupQuantSimd, GroupRangeIsThePlainScan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> groups;
  for (int64_t n : {1, 5, 15, 16, 17, 31, 32, 33, 49, 64, 300}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 11) - 5.0f;
    groups.push_back(x);
    for (int64_t at : {int64_t{0}, int64_t{1}, int64_t{16}, n - 1}) {  // a NaN there
      if (at >= n) continue;
      std::vector<float> y = x;
      y[static_cast<size_t>(at)] = nan;
      groups.push_back(y);
    }
    for (const float sign : {1.0f, -1.0f}) {  // all zeros of both signs: min and max both zero
      std::vector<float> z(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) z[static_cast<size_t>(i)] = (i % 16 == 0) == (i < 16) ? sign * 0.0f : -sign * 0.0f;
      groups.push_back(z);
      std::vector<float> pos = z, neg = z;  // a zero minimum over positives, a zero maximum over negatives
      for (int64_t i = 0; i < n; i += 3) {
        pos[static_cast<size_t>(i)] = 2.0f;
        neg[static_cast<size_t>(i)] = -2.0f;
      }
      groups.push_back(pos);
      groups.push_back(neg);
    }
  }
  // The first zero in a later lane than a zero of the other sign found in a later row: lane order
  // alone would take the other.
  for (const float sign : {1.0f, -1.0f}) {
    std::vector<float> pos(32, 2.0f), neg(32, -2.0f);
    pos[2] = neg[2] = sign * 0.0f;
    pos[17] = neg[17] = -sign * 0.0f;
    groups.push_back(pos);
    groups.push_back(neg);
  }
  for (const std::vector<float>& x : groups) {
    float mn = x[0], mx = x[0];
    for (const float v : x) {
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
    float got_mn = 0, got_mx = 0;
    group_simd::group_range(x.data(), static_cast<int64_t>(x.size()), got_mn, got_mx);
    EXPECT_EQ(std::memcmp(&got_mn, &mn, 4), 0) << "min of a group of " << x.size() << ": " << got_mn << " for " << mn;
    EXPECT_EQ(std::memcmp(&got_mx, &mx, 4), 0) << "max of a group of " << x.size() << ": " << got_mx << " for " << mx;
  }
}

// A noise block is rounding_noise16 element by element (the SIMD lanes' words the scalar hash's).
TEST(GroupQuantSimd, NoiseBlocksAreTheReferenceNoise) {
  for (const int64_t block : {int64_t{0}, int64_t{1}, int64_t{12345}, (int64_t{1} << 26) - 1, int64_t{1} << 26,
                              (int64_t{1} << 33) + 7}) {
    uint16_t got[128];
    simd::noise_block16(noise_key(0x1234567890ull, 0xABCDEF01234ull), block, got);
    for (int64_t i = 0; i < 128; ++i)
      ASSERT_EQ(got[i], rounding_noise16(0x1234567890ull, 0xABCDEF01234ull, static_cast<uint64_t>(block * 128 + i)))
          << "block " << block << " element " << i;
  }
}

// A run of blocks is the reference noise too, where a block starts a new high half of the hash's
// word index (block 2^26: word 2^32).
TEST(GroupQuantSimd, NoiseRunsOfBlocksAreTheReferenceNoise) {
  const QuantNoise noise{0x1234567890ull, 0xABCDEF01234ull};
  for (const int64_t b0 : {int64_t{0}, int64_t{5}, (int64_t{1} << 26) - 1, (int64_t{1} << 26) - 2}) {
    for (const int64_t blocks : {1, 2, 3, 5}) {
      std::vector<uint16_t> got(static_cast<size_t>(128 * blocks));
      group_simd::fill_noise_blocks(noise, b0, b0 + blocks - 1, got.data());
      for (int64_t i = 0; i < 128 * blocks; ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)], rounding_noise16(noise.seed, noise.stream, static_cast<uint64_t>(b0 * 128 + i)))
            << blocks << " blocks from " << b0 << ", element " << i;
    }
  }
}

// Packing and unpacking 2- and 4-bit codes a word at a time gives pack_group_codes' layout.
TEST(GroupQuantSimd, PackChunkIsPackGroupCodes) {
  for (const int bits : {2, 4}) {
    for (const int64_t n : {1, 3, 4, 7, 8, 49, 64, 65, 256}) {
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) codes[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 7 + n) % (1 << bits));
      std::vector<uint8_t> want(static_cast<size_t>(packed_bytes(n, bits))), got(want.size());
      pack_group_codes(codes.data(), n, bits, want.data());
      if (bits == 2)
        group_simd::pack_chunk<2>(codes.data(), n, got.data());
      else
        group_simd::pack_chunk<4>(codes.data(), n, got.data());
      EXPECT_EQ(got, want) << bits << " bits, " << n << " codes";
    }
  }
}

}  // namespace
}  // namespace packrat
