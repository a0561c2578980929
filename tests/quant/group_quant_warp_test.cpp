// The per-group codec's CUDA kernels without a GPU: their warps (quant/group/group_quant_warp.h's steps,
// in quant/cuda/group_quant_cuda.cu's order) replayed on the host, lane by lane, shuffles and shared
// memory included, write the CPU kernel's codes, metadata, variance bounds and floats byte for byte.
#include "quant/group/group_quant_warp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "quant/group/group_quant.h"
#include "tests/support/group_cases.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

const QuantNoise kNoise{0x5EEDull, quant_stream(7, 2)};

using LaneZeros = std::array<uint64_t, kWarpLanes>;  // each lane's first zero (first_zero_in's encoding)

// The kernels' butterfly over groups of `lanes` lanes: lane l merges lane l ^ offset's scan and
// first zero for offset lanes / 2, ..., 1 (each reading what the other held before the step),
// then settles a zero extreme and finishes.
void merge_lanes(std::vector<RangeScan>& range, LaneZeros& zero, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    const std::vector<RangeScan> before = range;
    const LaneZeros zero_before = zero;
    for (int l = 0; l < kWarpLanes; ++l) {
      range[l].merge(before[l ^ offset]);
      zero[l] = std::min(zero_before[l], zero_before[l ^ offset]);
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    if (range[l].ends_in_zero()) range[l].settle_zero(zero[l]);
    range[l].finish();
  }
}

// quantize_groups_kernel, warp by warp: every phase runs on all 32 lanes before the next, a
// shuffle reads what its source lane held before the step, and the shared noise words are
// poisoned before each chunk so that a word no lane wrote cannot pass.
void replay_quantize(const float* x, const GroupGeometry& g, int lanes, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, double* range_sq) {
  const int64_t rounds = quantize_rounds(g, lanes), chunks = quantize_chunks(g, lanes);
  using Block = std::array<float, 8>;
  using LaneBlocks = std::array<Block, kLaneBlocks>;  // a lane's blocks of the current chunk
  for (int64_t warp = 0; warp < quantize_warps(g, lanes); ++warp) {
    std::vector<QuantLane> q;
    std::array<LaneBlocks, kWarpLanes> v{};
    std::array<std::array<int, kLaneBlocks>, kWarpLanes> n{};
    // Lane `lane`'s blocks of chunk c into v and n.
    auto load_chunk = [&](int lane, int64_t c) {
      for (int j = 0; j < kLaneBlocks; ++j) {
        const int64_t r = c * kLaneBlocks + j;
        n[lane][j] = lane_block_len(q[lane], lanes, r);
        v[lane][j].fill(0.0f);
        load_floats8(x + q[lane].at.start + 8 * lane_block(q[lane], lanes, r), n[lane][j], v[lane][j].data());
      }
    };
    std::vector<RangeScan> range;
    for (int lane = 0; lane < kWarpLanes; ++lane) {
      q.push_back(quant_lane(g, lanes, warp, lane));
      load_chunk(lane, 0);
    }
    for (int lane = 0; lane < kWarpLanes; ++lane) {
      range.emplace_back(v[lane & ~(lanes - 1)][0][0]);  // __shfl_sync(v[0][0], the group's first lane)
      for (int j = 0; j < kLaneBlocks; ++j) range[lane].keep(v[lane][j].data(), n[lane][j]);
      for (int64_t r = kLaneBlocks; r < rounds; ++r) {
        float w[8] = {};
        const int m = lane_block_len(q[lane], lanes, r);
        load_floats8(x + q[lane].at.start + 8 * lane_block(q[lane], lanes, r), m, w);
        range[lane].keep(w, m);
      }
    }
    // Each lane's first zero (the kernel looks for it only where the merged range ends in a zero;
    // it is used only there), then the butterfly.
    LaneZeros zero;
    zero.fill(kNoZero);
    for (int lane = 0; lane < kWarpLanes; ++lane)
      for (int64_t r = 0; r < rounds; ++r) {
        float w[8] = {};
        const int m = lane_block_len(q[lane], lanes, r);
        load_floats8(x + q[lane].at.start + 8 * lane_block(q[lane], lanes, r), m, w);
        zero[lane] = std::min(zero[lane], first_zero_in(w, m, 8 * lane_block(q[lane], lanes, r)));
      }
    merge_lanes(range, zero, lanes);
    std::vector<GroupParams> p;
    for (int lane = 0; lane < kWarpLanes; ++lane) {
      p.push_back(group_params(range[lane].mn, range[lane].mx, g.bits, g.meta));
      if (q[lane].active && q[lane].sub == 0) {
        store_group_meta(p[lane], g.meta, meta + q[lane].group * meta_bytes_per_group(g.meta));
        if (range_sq) range_sq[q[lane].group] = group_range_sq(p[lane], q[lane].at.len, g.bits);
      }
    }
    const int64_t warp_begin = q[0].at.start;
    const int64_t warp_end = q[q[0].last_lead].at.start + q[q[0].last_lead].at.len;
    const bool stochastic = rounding == Rounding::Stochastic;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c > 0)
        for (int lane = 0; lane < kWarpLanes; ++lane) load_chunk(lane, c);
      std::array<uint32_t, kChunkNoiseWords> words;
      words.fill(0xA5A5A5A5u);
      const NoiseChunk nc = noise_chunk(chunk_elements(warp_begin, warp_end, lanes, c));
      EXPECT_LE(shared_noise_index(nc.words + 3), kChunkNoiseWords);  // its words, and a last block's reads past them
      if (stochastic)
        for (int lane = 0; lane < kWarpLanes; ++lane) make_chunk_noise(noise, nc, lane, words.data());
      for (int lane = 0; lane < kWarpLanes; ++lane)
        for (int j = 0; j < kLaneBlocks; ++j) {
          const int64_t block = lane_block(q[lane], lanes, c * kLaneBlocks + j);
          if (n[lane][j] > 0)
            quantize_lane_block(v[lane][j].data(), n[lane][j], static_cast<uint64_t>(q[lane].at.start + 8 * block),
                                p[lane], g.bits, nc, stochastic ? words.data() : nullptr,
                                codes + q[lane].at.code_offset + block * g.bits);
        }
    }
  }
}

TEST(GroupQuantWarp, ReplayedQuantizeWarpsWriteTheCpuKernelsBytes) {
  for (const testing::GroupCase& k : testing::group_cases()) {
    const int64_t n = k.samples * k.span;
    const std::vector<float> x = testing::group_values(n, static_cast<uint64_t>(k.c.bits * 7 + k.c.group_size));
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta(static_cast<size_t>(g.meta_bytes()));
    std::vector<double> range_sq;
    quantize_groups(x.data(), g, k.c.rounding, kNoise, codes.data(), meta.data(), &range_sq);
    // The kernel's lanes, and a whole warp a group (the other schedule chunk_elements allows).
    for (int lanes : {quantize_lanes(g.group_size), kWarpLanes}) {
      std::vector<uint8_t> wcodes(codes.size(), 0xEE), wmeta(meta.size(), 0xEE);
      std::vector<double> wrange_sq(range_sq.size(), -1.0);
      replay_quantize(x.data(), g, lanes, k.c.rounding, kNoise, wcodes.data(), wmeta.data(), wrange_sq.data());
      ASSERT_EQ(wcodes, codes) << k.name() << " lanes " << lanes << ": codes";
      ASSERT_EQ(wmeta, meta) << k.name() << " lanes " << lanes << ": metadata";
      ASSERT_EQ(wrange_sq, range_sq) << k.name() << " lanes " << lanes << ": variance bounds";
    }
  }
}

TEST(GroupQuantWarp, SmallGroupsShareAWarpAndLargeOnesTakeChunks) {
  // Each lane takes kLaneBlocks (4) blocks of 8: groups of 256 take 8 lanes, 4 groups a warp.
  EXPECT_EQ(quantize_lanes(7), 1);
  EXPECT_EQ(quantize_lanes(32), 1);
  EXPECT_EQ(quantize_lanes(49), 2);
  EXPECT_EQ(quantize_lanes(64), 2);
  EXPECT_EQ(quantize_lanes(256), 8);
  EXPECT_EQ(quantize_lanes(1000), 32);
  EXPECT_EQ(quantize_lanes(5000), 32);
  EXPECT_EQ(dequantize_lanes(7), 2);
  EXPECT_EQ(dequantize_lanes(64), 16);
  EXPECT_EQ(dequantize_lanes(256), 32);
  GroupQuantConfig c;
  c.group_size = 5000;
  const GroupGeometry big = group_geometry(3 * 5013, 3, c);
  EXPECT_EQ(quantize_rounds(big, 32), 20);
  EXPECT_EQ(quantize_chunks(big, 32), 5);
  // Groups of 256 from element 0: 4 a warp, their 1024 elements' noise 512 words, two elements a word.
  c.group_size = 256;
  const GroupGeometry a = group_geometry(4096, 1, c);
  EXPECT_EQ(quantize_chunks(a, 8), 1);
  const QuantLane q = quant_lane(a, 8, 3, 13);
  EXPECT_EQ(q.at.start, (3 * 4 + 1) * 256);
  EXPECT_EQ(q.sub, 5);
  EXPECT_EQ(noise_chunk(chunk_elements(3 * 1024, 4 * 1024, 8, 0)).words, 512);
}

// Runs of up to 1024 elements from any start: every element's noise read back from the words the
// 32 lanes wrote is rounding_noise16's, element by element and a block of 8 at a time (from
// every block start of the run, clipped to it; the words on the heap, exactly a warp's, so that a
// sanitizer build sees a read past them).
TEST(GroupQuantWarp, AChunksSharedNoiseWordsGiveEveryElementItsRoundingNoise) {
  const uint64_t seed = 0x5EEDull, stream = quant_stream(3, 1);
  for (int64_t begin : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{128}, int64_t{1013}, int64_t{5} << 33})
    for (int64_t len : {1, 7, 49, 128, 129, 255, 256, 897, 1023, 1024}) {
      const NoiseChunk r = noise_chunk({begin, begin + len});
      ASSERT_LE(shared_noise_index(r.words + 3), kChunkNoiseWords);
      std::vector<uint32_t> words(kChunkNoiseWords, 0xA5A5A5A5u);
      for (int lane = 0; lane < kWarpLanes; ++lane) make_chunk_noise({seed, stream}, r, lane, words.data());
      for (int64_t e = begin; e < begin + len; ++e)
        ASSERT_EQ(chunk_noise16(r, words.data(), static_cast<uint64_t>(e)),
                  rounding_noise16(seed, stream, static_cast<uint64_t>(e)))
            << "run from " << begin << " of " << len << ", element " << e;
      for (int64_t e0 = begin; e0 < begin + len; e0 += 8) {
        const int n = static_cast<int>(std::min<int64_t>(8, begin + len - e0));
        uint32_t half[8];
        chunk_noise16_block8(r, words.data(), static_cast<uint64_t>(e0), n, half);
        for (int k = 0; k < n; ++k)
          ASSERT_EQ(half[k], rounding_noise16(seed, stream, static_cast<uint64_t>(e0 + k)))
              << "run from " << begin << " of " << len << ", block at " << e0 << ", element " << k;
      }
    }
  EXPECT_EQ(noise_chunk({10, 10}).words, 0);  // an empty round draws nothing
}

// The lanes' scans merged in the kernels' butterfly order give the plain scan's (min, max), with
// a NaN first value (kept), later NaNs (ignored) and signed zeros (the first one found): a warp's
// lanes on blocks of 8, lane l on blocks l, l + 32, ... (the per-group kernel with a warp a
// group, and the mixed quantizer's warp_range, quant/cuda/warp_range.cuh).
TEST(GroupQuantWarp, MergedLaneRangesAreThePlainScans) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> groups = {{nan, 1.0f, -2.0f, 3.0f},         {1.0f, nan, -2.0f, 3.0f, nan},
                                            {0.0f, -0.0f, 0.0f, -0.0f},       {-0.0f, 1.0f, 0.0f, 2.0f, -0.0f},
                                            {nan, 0.0f, -0.0f, 1.0f},         {3.0f, -0.0f, 0.0f, -1.0f},
                                            {-2.0f, 0.0f, -0.0f, -1.0f, 0.0f}};
  std::vector<float> long_one(300);
  for (size_t i = 0; i < long_one.size(); ++i) long_one[i] = i % 7 == 3 ? -0.0f : i % 5 == 1 ? 0.0f : 1.0f;
  groups.push_back(long_one);
  for (const std::vector<float>& x : groups) {
    float mn = x[0], mx = x[0];
    for (float y : x) {
      mn = y < mn ? y : mn;
      mx = y > mx ? y : mx;
    }
    const int64_t len = static_cast<int64_t>(x.size());
    std::vector<RangeScan> lane(kWarpLanes, RangeScan(x[0]));
    LaneZeros zero;
    zero.fill(kNoZero);
    for (int l = 0; l < kWarpLanes; ++l)
      for (int64_t b = l; 8 * b < len; b += kWarpLanes) {
        const int m = static_cast<int>(std::min<int64_t>(8, len - 8 * b));
        lane[l].keep(x.data() + 8 * b, m);
        zero[l] = std::min(zero[l], first_zero_in(x.data() + 8 * b, m, 8 * b));
      }
    merge_lanes(lane, zero, kWarpLanes);
    for (int l = 0; l < kWarpLanes; ++l) {
      ASSERT_EQ(std::memcmp(&lane[l].mn, &mn, 4), 0) << "lane " << l << " of a group of " << len;
      ASSERT_EQ(std::memcmp(&lane[l].mx, &mx, 4), 0) << "lane " << l << " of a group of " << len;
    }
  }
}

TEST(GroupQuantWarp, DequantizeQuadsWriteTheCpuKernelsFloats) {
  for (const testing::GroupCase& k : testing::group_cases()) {
    const int64_t n = k.samples * k.span;
    const std::vector<float> x = testing::group_values(n, static_cast<uint64_t>(k.c.bits * 5 + k.c.group_size));
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta(static_cast<size_t>(g.meta_bytes()));
    quantize_groups(x.data(), g, k.c.rounding, kNoise, codes.data(), meta.data());
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_groups(codes.data(), meta.data(), g, out.data());
    for (int lanes : {dequantize_lanes(g.group_size), 1, kWarpLanes}) {
      std::vector<float> body_out(static_cast<size_t>(n), -99.0f);
      testing::run_lanes_on_host(g.groups(), lanes, DequantizeQuadsBody<StoreValues>{codes.data(), meta.data(), g, StoreValues{body_out.data()}});
      ASSERT_EQ(std::memcmp(out.data(), body_out.data(), out.size() * sizeof(float)), 0)
          << k.name() << " lanes " << lanes;
    }
  }
}

}  // namespace
}  // namespace packrat
