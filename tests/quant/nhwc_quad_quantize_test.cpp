// The tile-free NHWC quantize (quant/nhwc_quad_quantize.h), on the host: its plan takes the
// shapes it promises (ResNet-18's activations on CIFAR) and refuses the ones it cannot, and its
// three phases, run thread by thread and run by run as a CUDA block runs them, write the CPU
// kernel's codes, metadata and range_sq for the plain tensor: per plane, per sample and flat
// groups, every width, both roundings, with zero extremes of either sign and NaN values. On a GPU,
// PACKRAT_NHWC_QUANTIZE=quads runs the kernel under the codec suites (scripts/device_check.sh,
// EXPERIMENT).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "quant/group_quant.h"
#include "quant/nhwc_quad_quantize.h"
#include "tests/quant/nhwc_cases.h"

namespace packrat {
namespace {

using namespace nhwc_cases;

NhwcQuadPlan plan_of(const Case& k, int64_t group_size = 0) {
  Case c = k;
  if (group_size) c.group_size = group_size;
  return nhwc_quad_plan(geometry_of(c, 2), CodecWalk{c.c, c.h * c.w, true});
}

TEST(NhwcQuadQuantize, PlanTakesResNetActivationsAndRefusesWhatItCannot) {
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
    const NhwcQuadPlan p = plan_of(t.shape);
    EXPECT_EQ(p.quads_per_run, t.quads_per_run) << t.shape.name();
    EXPECT_LE(p.run_values(), kQuadRunValues) << t.shape.name();
    EXPECT_LE(p.boxes(), kQuadBoxThreads) << t.shape.name();
    EXPECT_EQ(p.runs * p.run_values(), t.shape.n * t.shape.c * t.shape.h * t.shape.w) << t.shape.name();
  }
  const Case refused[] = {
      {512, 3, 32, 32, 256, Grouping::PerSample},    // 3 channels: no quads
      {8, 64, 7, 7, 64, Grouping::PerSample},        // planes of 49: blocks would straddle channels
      {8, 64, 8, 10, 32, Grouping::PerPlane},        // planes of 80 in 3 groups of 27: not whole blocks
      {8, 64, 32, 32, 100, Grouping::PerSample},     // groups of 100
      {8, 64, 48, 48, 256, Grouping::PerSample},     // planes of 2304: a quad plane over a run
      {2, 4, 24, 24, 1024, Grouping::Flat}};         // runs of 2304 cut groups of 1024
  for (const Case& k : refused) EXPECT_EQ(plan_of(k).quads_per_run, 0) << k.name();
  EXPECT_EQ(nhwc_quad_plan(geometry_of(taken[0].shape, 2), CodecWalk{64, 1024, false}).quads_per_run, 0)
      << "a walk that is not NHWC";
}

struct Written {
  std::vector<uint8_t> codes, meta;
  std::vector<double> range_sq;
};

// The kernel's phases on the host: per run, phase A for every thread, phase B for every group
// (its lanes' parts merged in order: the kernel's shuffles merge them in another, which RangeScan
// makes the same), phase C for every thread. Shared memory starts as garbage, as on a GPU.
Written quantize_quads(const std::vector<float>& nhwc, const GroupGeometry& g, const NhwcQuadPlan& p,
                       Rounding rounding) {
  Written w{std::vector<uint8_t>(static_cast<size_t>(g.code_bytes()), 0xEE),
            std::vector<uint8_t>(static_cast<size_t>(g.meta_bytes()), 0xEE),
            std::vector<double>(static_cast<size_t>(g.groups()), -1.0)};
  auto s = std::make_unique<NhwcQuadShared>();
  struct Registers {
    float v[4][8];  // (channel, pixel) of the thread's box
  };
  std::vector<Registers> threads(kQuadBoxThreads);
  const bool stochastic = rounding == Rounding::Stochastic;
  for (int64_t r = 0; r < p.runs; ++r) {
    std::memset(s.get(), 0xCD, sizeof(NhwcQuadShared));
    const ElementRun run = nhwc_quad_run(p, r);
    const NoiseChunk nc = noise_chunk(run);
    for (int t = 0; t < kQuadBoxThreads; ++t) {
      const NhwcQuadBox b = nhwc_quad_box(p, r, t);
      if (b.active) load_quad_box(nhwc.data(), p, b, threads[static_cast<size_t>(t)].v);
      if (stochastic) make_chunk_noise(kNoise, nc, t, s->noise, kQuadBoxThreads);
      if (b.active) keep_box_ranges(threads[static_cast<size_t>(t)].v, p, b, *s);
    }
    const QuadRunGroups groups = quad_run_groups(g, run);
    for (int64_t i = 0; i < groups.count; ++i) {
      const QuadGroup grp = quad_group(g, run, groups.first + i);
      GroupRangePart all;
      for (int sub = 0; sub < p.lanes; ++sub) all = merge_parts(all, group_range_part(*s, grp, sub, p.lanes));
      const GroupParams params = settle_quad_group(*s, grp, all, g.bits, g.meta);
      store_group_meta(params, g.meta, w.meta.data() + grp.group * meta_bytes_per_group(g.meta));
      w.range_sq[static_cast<size_t>(grp.group)] = group_range_sq(params, 8 * int64_t{grp.blocks}, g.bits);
      for (int sub = 0; sub < p.lanes; ++sub) keep_group_params(*s, grp, sub, p.lanes, params);
    }
    for (int t = 0; t < kQuadBoxThreads; ++t) {
      const NhwcQuadBox b = nhwc_quad_box(p, r, t);
      if (b.active)
        quantize_quad_box(threads[static_cast<size_t>(t)].v, p, b, g.bits, nc, *s, stochastic ? s->noise : nullptr, w.codes.data());
    }
  }
  return w;
}

void expect_cpu_bytes(const Case& k, int bits, Rounding rounding, MetaType meta) {
  const int64_t p = k.h * k.w, numel = k.n * k.c * p;
  GroupGeometry g = geometry_of(k, bits);
  g.meta = meta;
  const NhwcQuadPlan plan = nhwc_quad_plan(g, CodecWalk{k.c, p, true});
  const std::string what = fmt::format("{}, {} bits, {}, {} metadata", k.name(), bits, rounding_name(rounding), meta_name(meta));
  ASSERT_GT(plan.quads_per_run, 0) << what;
  const std::vector<float> plain = hostile_values(numel, g.group_size, static_cast<uint64_t>(numel + bits));
  std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), metadata(static_cast<size_t>(g.meta_bytes()));
  std::vector<double> range_sq;
  quantize_groups(plain.data(), g, rounding, kNoise, codes.data(), metadata.data(), &range_sq);
  const Written quads = quantize_quads(to_nhwc(plain, k.n, k.c, p), g, plan, rounding);
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

TEST(NhwcQuadQuantize, PhasesWriteTheCpuBytesOfThePlainTensor) {
  for (const Case& k : kQuadCases) expect_cpu_bytes(k, 2, Rounding::Stochastic, MetaType::BF16);
}

TEST(NhwcQuadQuantize, EveryWidthRoundingAndMetadata) {
  for (const Case& k : {kQuadCases[0], kQuadCases[6]})
    for (int bits : {1, 2, 3, 4, 8})
      for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
        for (MetaType meta : {MetaType::BF16, MetaType::F32}) expect_cpu_bytes(k, bits, rounding, meta);
}

}  // namespace
}  // namespace packrat
