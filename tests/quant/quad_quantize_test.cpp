// The quads quantize (quant/cuda/quad_quantize.h), on the host: its plans take the shapes they promise
// (ResNet-18's activations on CIFAR in NHWC, plain tensors in runs that divide them) and refuse the
// ones they cannot, and its three phases, run thread by thread and run by run as a CUDA block runs
// them, write the CPU kernel's codes, metadata and range_sq for the plain tensor: per plane, per
// sample and flat groups, every width, both roundings, with zero extremes of either sign and NaN
// values. On a GPU the codec suites run the kernel (the default), and again the older ones with
// PACKRAT_QUANTIZE=staged (scripts/device_check.sh, EXPERIMENT).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "quant/group/group_quant.h"
#include "quant/cuda/quad_quantize.h"
#include "tests/quant/nhwc_cases.h"

namespace packrat {
namespace {

using namespace nhwc_cases;

QuadPlan plan_of(const Case& k) { return nhwc_quad_plan(geometry_of(k, 2), CodecWalk{k.c, k.h * k.w, true}); }

TEST(QuadQuantize, PlanTakesResNetActivationsAndRefusesWhatItCannot) {
  // ResNet-18's CIFAR activations, ActNN's groups of 256 per sample: runs of 8192 values.
  const struct {
    Case shape;
    int quads_per_run;
  } taken[] = {{{512, 64, 32, 32, 256, Grouping::PerSample}, 2},
               {{512, 128, 16, 16, 256, Grouping::PerSample}, 8},
               {{512, 256, 8, 8, 256, Grouping::PerSample}, 32},
               {{512, 512, 4, 4, 256, Grouping::PerSample}, 128},
               {{8, 64, 32, 32, 256, Grouping::PerPlane}, 2},
               {{3, 12, 8, 8, 256, Grouping::PerSample}, 3},  // a sample's 3 quads: one run a sample
               {{2, 4, 24, 24, 128, Grouping::Flat}, 1}};
  for (const auto& t : taken) {
    const QuadPlan p = plan_of(t.shape);
    EXPECT_EQ(p.quads_per_run, t.quads_per_run) << t.shape.name();
    EXPECT_LE(p.run_values(), kQuadRunValues) << t.shape.name();
    EXPECT_LE(p.boxes(), kQuadBoxThreads) << t.shape.name();
    EXPECT_EQ(p.runs * p.run_values(), t.shape.n * t.shape.c * t.shape.h * t.shape.w) << t.shape.name();
  }
  const Case refused[] = {
      {512, 3, 32, 32, 256, Grouping::PerSample},  // 3 channels: no quads
      {8, 64, 7, 7, 64, Grouping::PerSample},      // planes of 49: blocks would straddle channels
      {8, 64, 8, 10, 32, Grouping::PerPlane},      // planes of 80 in 3 groups of 27: not whole blocks
      {8, 64, 32, 32, 100, Grouping::PerSample},   // groups of 100
      {8, 64, 48, 48, 256, Grouping::PerSample},   // planes of 2304: a quad plane over a run
      {2, 4, 24, 24, 1024, Grouping::Flat}};       // runs of 2304 cut groups of 1024
  for (const Case& k : refused) EXPECT_EQ(plan_of(k).quads_per_run, 0) << k.name();
  EXPECT_EQ(nhwc_quad_plan(geometry_of(taken[0].shape, 2), CodecWalk{64, 1024, false}).quads_per_run, 0)
      << "a walk that is not NHWC";
}

// A plain tensor of `samples` samples of `span` values, groups of `group` per sample or over all.
GroupGeometry plain_geometry(int64_t samples, int64_t span, int64_t group, Grouping grouping, int bits = 2) {
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = group;
  c.grouping = grouping;
  return group_geometry(samples * span, samples, c);
}

TEST(QuadQuantize, PlainPlanTakesRunsThatDivideTheTensorOnGroupEdges) {
  const struct {
    GroupGeometry g;
    int64_t run;
  } taken[] = {{plain_geometry(512, 512, 256, Grouping::PerSample), 8192},  // ResNet-18's fc input
               {plain_geometry(1024, 65536, 256, Grouping::PerSample), 8192},
               {plain_geometry(6, 48, 16, Grouping::PerSample), 288},  // 9 threads a run
               {plain_geometry(4, 1000, 200, Grouping::PerSample), 4000},
               {plain_geometry(1, 4000, 256, Grouping::Flat), 4000}};  // a last group of 160
  for (const auto& t : taken) {
    const QuadPlan p = plain_quad_plan(t.g);
    const std::string what = fmt::format("{} values, groups of {}", t.g.numel, t.g.group_size);
    EXPECT_EQ(p.run_values(), t.run) << what;
    EXPECT_LE(p.boxes(), kQuadBoxThreads) << what;
    EXPECT_EQ(p.runs * p.run_values(), t.g.numel) << what;
  }
  const GroupGeometry refused[] = {
      plain_geometry(4, 1000, 100, Grouping::PerSample),  // groups of 100: not whole blocks
      plain_geometry(7, 8, 8, Grouping::PerSample),       // 56 values: no run of 32 divides them
      plain_geometry(2, 65536, 16384, Grouping::Flat)};   // a group over a run
  for (const GroupGeometry& g : refused) EXPECT_EQ(plain_quad_plan(g).quads_per_run, 0) << g.numel;
}

// The most distinct 4-byte words one bank serves for the lanes' byte addresses (a conflict's ways).
int bank_ways(const std::vector<int64_t>& addresses, int size) {
  std::vector<std::vector<int64_t>> words(32);
  for (int64_t a : addresses)
    for (int64_t w = a / 4; w <= (a + size - 1) / 4; ++w) {
      auto& bank = words[static_cast<size_t>(w % 32)];
      if (std::find(bank.begin(), bank.end(), w) == bank.end()) bank.push_back(w);
    }
  size_t ways = 0;
  for (const auto& bank : words) ways = std::max(ways, bank.size());
  return static_cast<int>(ways);
}

// Every warp's accesses to its boxes' block j (phases A and C) under plan p: at most `ways` words
// a bank, for the 8-byte pairs (a half-warp a wavefront), the 4-byte firsts and the zero bytes.
void expect_box_banks(const QuadPlan& p, int ways, const std::string& plan) {
  for (int warp = 0; warp < kQuadBoxThreads / 32; ++warp)
    for (int j = 0; j < 4; ++j) {
      std::vector<int64_t> pairs[2], words, bytes;  // pairs: (half-warp)
      for (int lane = 0; lane < 32; ++lane) {
        const QuadBox b = quad_box(p, 0, 32 * warp + lane);
        if (!b.active) continue;
        const int block = b.block + j * p.pixel_blocks;
        pairs[lane / 16].push_back(8 * QuadShared::pair_slot(block));
        words.push_back(4 * QuadShared::word_slot(block));
        bytes.push_back(QuadShared::word_slot(block));
      }
      const std::string what = fmt::format("{}, warp {}, block {} of the box", plan, warp, j);
      EXPECT_LE(bank_ways(pairs[0], 8), ways) << what;
      EXPECT_LE(bank_ways(pairs[1], 8), ways) << what;
      EXPECT_LE(bank_ways(words, 4), ways) << what;
      EXPECT_LE(bank_ways(bytes, 1), ways) << what;
    }
}

// Phases A and C touch each box's blocks a quad's or a pixel block's stride apart; the swizzled
// slots put a warp's accesses (8-byte pairs by half-warps, 4-byte first values, zero bytes) in
// distinct banks where a run takes the most quads (8192 values: ResNet's activations), and at most
// 4 ways otherwise (fewer quads a run: samples of under 8192 values); the plain index had up to
// 16- and 32-way conflicts at planes of 32 and 64. Each slot function is a bijection of the run's blocks.
TEST(QuadQuantize, BoxAccessesToSharedMemoryHitDistinctBanks) {
  for (int b = 0; b < kQuadRunBlocks; ++b) {
    ASSERT_EQ(QuadShared::pair_slot(QuadShared::pair_slot(b)), b) << b;  // an XOR of high bits: its own inverse
    ASSERT_EQ(QuadShared::word_slot(QuadShared::word_slot(b)), b) << b;
  }
  for (int64_t plane = 8; plane <= 2048; plane *= 2)
    for (int64_t quads = 1; 4 * quads * plane <= kQuadRunValues; quads *= 2) {
      const Case shape{2, 4 * quads, plane, 1, 256, Grouping::PerPlane};  // a run a sample, of `quads` quads
      const QuadPlan p = plan_of(shape);
      ASSERT_EQ(p.quads_per_run, quads) << shape.name();
      const bool most = 8 * quads * plane > kQuadRunValues;
      expect_box_banks(p, most ? 1 : 4, fmt::format("planes of {}, {} quads a run", plane, quads));
    }
}

// A plain tensor's box blocks: a warp's lanes on consecutive blocks, so no bank serves two words.
TEST(QuadQuantize, PlainBoxAccessesToSharedMemoryHitDistinctBanks) {
  for (int64_t run = 256; run <= kQuadRunValues; run *= 2) {
    GroupQuantConfig c;
    c.group_size = 256;
    const QuadPlan p = plain_quad_plan(group_geometry(run, 1, c));
    ASSERT_EQ(p.run_values(), run);
    expect_box_banks(p, 1, fmt::format("plain runs of {}", run));
  }
}

struct Written {
  std::vector<uint8_t> codes, meta;
  std::vector<double> range_sq;
};

// The kernel's phases on the host: per run, phase A for every thread, phase B for every warp (its
// teams' shuffles emulated), phase C for every thread. Shared memory starts as garbage, as on a GPU.
Written quantize_quads(const std::vector<float>& nhwc, const GroupGeometry& g, const QuadPlan& p,
                       Rounding rounding) {
  Written w{std::vector<uint8_t>(static_cast<size_t>(g.code_bytes()), 0xEE),
            std::vector<uint8_t>(static_cast<size_t>(g.meta_bytes()), 0xEE),
            std::vector<double>(static_cast<size_t>(g.groups()), -1.0)};
  auto s = std::make_unique<QuadShared>();
  struct Registers {
    float v[4][8];  // (channel, pixel) of the thread's box
  };
  std::vector<Registers> threads(kQuadBoxThreads);
  const bool stochastic = rounding == Rounding::Stochastic;
  for (int64_t r = 0; r < p.runs; ++r) {
    std::memset(s.get(), 0xCD, sizeof(QuadShared));
    const ElementRun run = quad_run(p, r);
    const NoiseChunk nc = noise_chunk(run);
    for (int t = 0; t < kQuadBoxThreads; ++t) {
      const QuadBox b = quad_box(p, r, t);
      if (b.active) load_quad_box(nhwc.data(), p, b, threads[static_cast<size_t>(t)].v);
      if (stochastic) make_chunk_noise(kNoise, nc, t, s->noise, kQuadBoxThreads);
      if (b.active) keep_box_ranges(threads[static_cast<size_t>(t)].v, p, b, *s);
    }
    // Phase B, a warp at a time in lockstep: every lane's part, the kernel's xor butterfly over
    // them, then each active lane settles its group (the same on all of its team).
    const QuadRunGroups groups = quad_run_groups(g, run);
    for (int64_t round = 0; round < quad_team_rounds(p, groups); ++round)
      for (int warp = 0; warp < kQuadBoxThreads / 32; ++warp) {
        QuadTeamLane lanes[32];
        QuadGroup grps[32];
        GroupRangePart parts[32];
        for (int lane = 0; lane < 32; ++lane) {
          lanes[lane] = quad_team_lane(p, groups, round, 32 * warp + lane);
          if (!lanes[lane].active) continue;
          grps[lane] = quad_group(g, run, groups.first + lanes[lane].i);
          parts[lane] = group_range_part(*s, grps[lane], lanes[lane].sub, p.lanes);
        }
        for (int offset = p.lanes / 2; offset > 0; offset /= 2) {
          GroupRangePart merged[32];
          for (int lane = 0; lane < 32; ++lane) merged[lane] = merge_parts(parts[lane], parts[lane ^ offset]);
          std::copy(merged, merged + 32, parts);
        }
        for (int lane = 0; lane < 32; ++lane) {
          if (!lanes[lane].active) continue;
          const QuadGroup& grp = grps[lane];
          const GroupParams params = settle_quad_group(*s, grp, parts[lane], g.bits, g.meta);
          if (lanes[lane].sub == 0) {
            store_group_meta(params, g.meta, w.meta.data() + grp.group * meta_bytes_per_group(g.meta));
            w.range_sq[static_cast<size_t>(grp.group)] = group_range_sq(params, 8 * int64_t{grp.blocks}, g.bits);
          }
          keep_group_params(*s, grp, lanes[lane].sub, p.lanes, params);
        }
      }
    for (int t = 0; t < kQuadBoxThreads; ++t) {
      const QuadBox b = quad_box(p, r, t);
      if (!b.active) continue;
      const uint32_t* noise = stochastic ? s->noise : nullptr;
      quantize_quad_box(threads[static_cast<size_t>(t)].v, p, b, g.bits, nc, *s, noise, w.codes.data());
    }
  }
  return w;
}

// The phases under `plan` on the tensor's buffer (to_buffer of its plain values, hostile ones) write
// the CPU kernel's codes, metadata and range_sq for the plain tensor.
template <class ToBuffer>
void expect_quads_write_cpu_bytes(const GroupGeometry& g, const QuadPlan& plan, Rounding rounding, ToBuffer&& to_buffer,
                                  const std::string& what) {
  ASSERT_GT(plan.quads_per_run, 0) << what;
  const std::vector<float> plain = hostile_values(g.numel, g.group_size, static_cast<uint64_t>(g.numel + g.bits));
  std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), metadata(static_cast<size_t>(g.meta_bytes()));
  std::vector<double> range_sq;
  quantize_groups(plain.data(), g, rounding, kNoise, codes.data(), metadata.data(), &range_sq);
  const Written quads = quantize_quads(to_buffer(plain), g, plan, rounding);
  EXPECT_EQ(quads.codes, codes) << what;
  EXPECT_EQ(quads.meta, metadata) << what;
  ASSERT_EQ(quads.range_sq.size(), range_sq.size()) << what;
  for (size_t i = 0; i < range_sq.size(); ++i) {
    if (std::isnan(range_sq[i])) {  // a NaN first value's group
      EXPECT_TRUE(std::isnan(quads.range_sq[i])) << what << " group " << i;
      continue;
    }
    ASSERT_EQ(quads.range_sq[i], range_sq[i]) << what << " group " << i;
  }
}

void expect_cpu_bytes(const Case& k, int bits, Rounding rounding, MetaType meta) {
  const int64_t p = k.h * k.w;
  GroupGeometry g = geometry_of(k, bits);
  g.meta = meta;
  expect_quads_write_cpu_bytes(
      g, nhwc_quad_plan(g, CodecWalk{k.c, p, true}), rounding,
      [&](const std::vector<float>& plain) { return to_nhwc(plain, k.n, k.c, p); },
      fmt::format("{}, {} bits, {}, {} metadata", k.name(), bits, rounding_name(rounding), meta_name(meta)));
}

TEST(QuadQuantize, PhasesWriteTheCpuBytesOfThePlainTensor) {
  for (const Case& k : kQuadCases) expect_cpu_bytes(k, 2, Rounding::Stochastic, MetaType::BF16);
}

// The phases on a plain tensor, its box 4 blocks a run's quarter apart.
void expect_plain_cpu_bytes(const GroupGeometry& geometry, Rounding rounding, MetaType meta) {
  GroupGeometry g = geometry;
  g.meta = meta;
  expect_quads_write_cpu_bytes(g, plain_quad_plan(g), rounding, [](const std::vector<float>& plain) { return plain; },
                               fmt::format("{} values, groups of {}, {} bits, {}, {} metadata", g.numel, g.group_size,
                                           g.bits, rounding_name(rounding), meta_name(meta)));
}

TEST(QuadQuantize, PlainPhasesWriteTheCpuBytes) {
  for (const GroupGeometry& g : {plain_geometry(4, 2048, 256, Grouping::PerSample),
                                 plain_geometry(6, 48, 16, Grouping::PerSample),
                                 plain_geometry(4, 1000, 200, Grouping::PerSample),
                                 plain_geometry(2, 8192, 1024, Grouping::PerSample),
                                 plain_geometry(1, 4000, 256, Grouping::Flat)})
    expect_plain_cpu_bytes(g, Rounding::Stochastic, MetaType::BF16);
  for (int bits : {1, 3, 4, 8})
    for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
      for (MetaType meta : {MetaType::BF16, MetaType::F32})
        expect_plain_cpu_bytes(plain_geometry(4, 2048, 256, Grouping::PerSample, bits), rounding, meta);
}

TEST(QuadQuantize, EveryWidthRoundingAndMetadata) {
  for (const Case& k : {kQuadCases[0], kQuadCases[6]})
    for (int bits : {1, 2, 3, 4, 8})
      for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
        for (MetaType meta : {MetaType::BF16, MetaType::F32}) expect_cpu_bytes(k, bits, rounding, meta);
}

}  // namespace
}  // namespace packrat
