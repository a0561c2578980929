// The lanes of the staged quantize that draws a Philox call a lane (quant/nhwc_quantize.h), on the
// host: which groups it takes, and that a group's lanes, rounds and half-words cover each of its
// elements once, each with the call and half-word rounding_noise16 gives that element. On a GPU,
// StoreCuda.GroupsOfAnNhwcTensorAreThePlainTensors compares the kernel's codes with the CPU's.
#include <gtest/gtest.h>

#include <vector>

#include "quant/group_quant.h"
#include "quant/nhwc_quantize.h"
#include "tests/quant/nhwc_cases.h"

namespace packrat {
namespace {

using namespace nhwc_cases;

TEST(NhwcQuantize, CallLanesTakeGroupsOfWholeNoiseBlocksAndByteCodes) {
  EXPECT_TRUE(nhwc_call_lanes_quantizable(geometry_of(Case{2, 8, 32, 32, 256}, 2)));
  EXPECT_TRUE(nhwc_call_lanes_quantizable(geometry_of(Case{2, 8, 32, 32, 256, Grouping::PerSample}, 1)));
  EXPECT_TRUE(nhwc_call_lanes_quantizable(geometry_of(Case{3, 12, 8, 8, 256, Grouping::PerSample}, 8)));
  EXPECT_TRUE(nhwc_call_lanes_quantizable(geometry_of(Case{2, 8, 16, 8, 128}, 4)));
  EXPECT_FALSE(nhwc_call_lanes_quantizable(geometry_of(Case{2, 8, 32, 32, 256}, 3))) << "3-bit codes straddle bytes";
  EXPECT_FALSE(nhwc_call_lanes_quantizable(geometry_of(Case{2, 20, 7, 7, 64}, 2))) << "groups of 64";
  EXPECT_FALSE(nhwc_call_lanes_quantizable(geometry_of(Case{3, 3, 9, 11, 256, Grouping::PerSample}, 2)))
      << "samples of 297: groups that start off a noise block";
  EXPECT_FALSE(nhwc_call_lanes_quantizable(geometry_of(Case{1, 8, 64, 64, 2048, Grouping::PerSample}, 2)))
      << "groups of 2048: over the 1024 a tile stages";
}

TEST(NhwcQuantize, AGroupsLanesDrawEachElementsOwnNoiseOnce) {
  const uint64_t seed = 0x5EEDull, stream = quant_stream(5, 3);
  for (const int64_t group_size : {128, 256, 512, 1024}) {
    GroupGeometry g;
    g.group_size = group_size;
    const int lanes = call_lanes_per_group(g), rounds = static_cast<int>(group_size) / (8 * lanes);
    const int64_t start = 3 * 1024 + 128;  // a group's first element: a multiple of 128
    std::vector<int> seen(static_cast<size_t>(group_size), 0);
    for (int sub = 0; sub < lanes; ++sub)
      for (int r = 0; r < rounds; ++r) {
        uint32_t w[4];
        Philox4x32::generate(seed, stream, call_lane_counter(start, sub, r), w);
        for (int h = 0; h < 8; ++h) {
          const int i = call_lane_element(sub, r, h);
          ASSERT_GE(i, 0);
          ASSERT_LT(i, group_size);
          ++seen[static_cast<size_t>(i)];
          ASSERT_EQ((w[h >> 1] >> (16 * (h & 1))) & 0xFFFFu,
                    rounding_noise16(seed, stream, static_cast<uint64_t>(start + i)))
              << "groups of " << group_size << ", lane " << sub << ", round " << r << ", half-word " << h;
        }
      }
    EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(group_size), 1)) << "groups of " << group_size;
    EXPECT_EQ(nhwc_call_lanes_block_groups(g) * group_size, kNhwcTileFloats);
  }
}

}  // namespace
}  // namespace packrat
