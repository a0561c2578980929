// Per-group codes of an NHWC tensor in plain order (quant/group/nhwc_tile.h), on the host: the phases a
// CUDA quantize block runs (stage its groups' run into a tile, quantize the tile's groups), thread
// by thread, give the CPU kernel's bytes for the plain tensor, for per-plane, per-sample and flat
// groups. The decode: tests/quant/nhwc_decode_test.cpp. On a GPU,
// StoreCuda.GroupsOfAnNhwcTensorAreThePlainTensors runs the kernels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "quant/group/group_quant.h"
#include "quant/group/nhwc_tile.h"
#include "tests/quant/nhwc_cases.h"
#include "tests/support/emulated_gpu.h"

namespace packrat {
namespace {

using testing::EmulatedGpu;
using namespace nhwc_cases;

// The codec's plan for a device's NHWC tensor: plain order under every grouping, staged where a
// block's groups and a plane fit the tile, else through a plain copy (never the buffer as it lies,
// whose groups would hold G / C pixels of every channel).
TEST(NhwcTile, AnNhwcTensorIsWalkedInPlainOrderUnderEveryGrouping) {
  EmulatedGpu gpu;
  {
    // Kernels that walk no NHWC tensor (the CPU's, which the emulated GPU runs) walk it as one
    // block of all its channels.
    const Tensor x = Tensor::empty({2, 8, 32, 32}, DType::f32, Layout::NHWC, MemTag::Workspace, EmulatedGpu::device());
    const CodecOrder o = codec_order(x, group_geometry_of(x, GroupQuantConfig{}));
    EXPECT_FALSE(o.via_plain);
    EXPECT_FALSE(o.walk.nhwc);
    EXPECT_EQ(o.walk.channels, 8);
    EXPECT_EQ(o.walk.block, 8);
    EXPECT_EQ(o.walk.plane, 1024);
  }
  gpu.claim_nhwc_walks();  // a GPU's kernels do
  auto order_of = [](const Shape& shape, Layout layout, const GroupQuantConfig& c) {
    const Tensor x = Tensor::empty(shape, DType::f32, layout, MemTag::Workspace, EmulatedGpu::device());
    return codec_order(x, group_geometry_of(x, c));
  };
  for (Grouping grouping : {Grouping::PerPlane, Grouping::PerSample, Grouping::Flat}) {
    GroupQuantConfig c;
    c.grouping = grouping;
    const std::string what(grouping_name(grouping));
    const CodecOrder staged = order_of({2, 8, 32, 32}, Layout::NHWC, c);
    EXPECT_TRUE(staged.walk.nhwc) << what;
    EXPECT_EQ(staged.walk.channels, 8) << what;
    EXPECT_EQ(staged.walk.plane, 1024) << what;
    EXPECT_FALSE(staged.via_plain) << what;
    const CodecOrder large_planes = order_of({2, 3, 40, 40}, Layout::NHWC, c);
    EXPECT_FALSE(large_planes.walk.nhwc) << what;
    EXPECT_TRUE(large_planes.via_plain) << what;
    const CodecOrder plain = order_of({2, 8, 32, 32}, Layout::Plain, c);
    EXPECT_EQ(plain.walk.channels, 0) << what;
    EXPECT_FALSE(plain.via_plain) << what;
    c.group_size = 2048;  // over a tile's 1024-value groups
    EXPECT_TRUE(order_of({2, 8, 32, 32}, Layout::NHWC, c).via_plain) << what;
  }
}

// 5 channels: one element at a time (for_nhwc_run); 12: quads of 4 channels, 8 and 16: vectors of 8
// (for_nhwc_vectors).
TEST(NhwcTile, StagingReadsTheRunInPlainOrder) {
  for (const int64_t c : {5, 8, 12, 16}) {
    const int64_t n = 3, p = 7 * 9, numel = n * c * p;
    const std::vector<float> plain = random_values(numel, 1), nhwc = to_nhwc(plain, n, c, p);
    const CodecWalk walk{c, p, true};
    EXPECT_EQ(nhwc_vector_width(walk), c % 8 == 0 ? 8 : c % 4 == 0 ? 4 : 1);
    // Runs within a channel, across channels (partial at both ends), across samples, the whole
    // tensor, channels 5 .. 6 (a quad's middle).
    const ElementRun runs[] = {{10, 40},  {p - 3, 3 * p + 5}, {2 * c * p - 7, 2 * c * p + 70},
                               {0, numel}, {p, 2 * p},         {5 * p + 2, 7 * p - 1}};
    for (const ElementRun& run : runs)
      for (int threads : {1, 37, 128, 256}) {
        const std::string what = fmt::format("{} channels, run [{}, {}), {} threads", c, run.begin, run.end, threads);
        std::vector<float> tile(static_cast<size_t>(run.end - run.begin), -99.0f);
        for (int t = 0; t < threads; ++t) nhwc_stage(walk, run, nhwc.data(), tile.data(), t, threads);
        for (int64_t i = 0; i < run.end - run.begin; ++i)
          ASSERT_EQ(tile[static_cast<size_t>(i)], plain[static_cast<size_t>(run.begin + i)]) << what << " element " << i;
      }
  }
}

// A quantize block's lanes read their group at values + (start - shift), values the staged tile
// (the kernel's arithmetic): quantize_group over it writes the CPU kernel's bytes of the plain tensor.
TEST(NhwcTile, StagedBlocksQuantizeToTheCpuBytesOfThePlainTensor) {
  for (const Case& k : kCases)
    for (int bits : {2, 4}) {
      const int64_t p = k.h * k.w, numel = k.n * k.c * p;
      const std::vector<float> plain = random_values(numel, static_cast<uint64_t>(numel + bits));
      const std::vector<float> nhwc = to_nhwc(plain, k.n, k.c, p);
      const GroupGeometry g = geometry_of(k, bits);
      const CodecWalk walk{k.c, p, true};
      ASSERT_TRUE(nhwc_stageable(g, walk)) << k.name();
      std::vector<uint8_t> cpu_codes(static_cast<size_t>(g.code_bytes())), cpu_meta(static_cast<size_t>(g.meta_bytes()));
      quantize_groups(plain.data(), g, Rounding::Stochastic, kNoise, cpu_codes.data(), cpu_meta.data());
      std::vector<uint8_t> codes(cpu_codes.size(), 0xEE), meta(cpu_meta.size(), 0xEE);
      const int64_t per_block = nhwc_quantize_block_groups(quantize_lanes(g.group_size));
      for (int64_t block = 0; block * per_block < g.groups(); ++block) {
        const NhwcBlock b = nhwc_block(g, per_block, block);
        ASSERT_LE(b.run.end - b.run.begin, kNhwcTileFloats) << k.name();
        std::vector<float> tile(kNhwcTileFloats, -99.0f);
        for (int t = 0; t < kNhwcBlockThreads; ++t) nhwc_stage(walk, b.run, nhwc.data(), tile.data(), t, kNhwcBlockThreads);
        const float* values = tile.data();
        const int64_t shift = b.run.begin;
        for (int64_t group = b.first; group < b.first + b.count; ++group) {
          const GroupGeometry::Place at = g.place(group);
          quantize_group(values + (at.start - shift), at.len, static_cast<uint64_t>(at.start), bits, g.meta,
                         Rounding::Stochastic, kNoise, meta.data() + group * meta_bytes_per_group(g.meta),
                         codes.data() + at.code_offset);
        }
      }
      EXPECT_EQ(codes, cpu_codes) << k.name() << " bits " << bits;
      EXPECT_EQ(meta, cpu_meta) << k.name() << " bits " << bits;
    }
}

}  // namespace
}  // namespace packrat
