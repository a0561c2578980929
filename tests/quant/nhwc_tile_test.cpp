// Per-group codes of an NHWC tensor in plain order (quant/nhwc_tile.h), on the host: the phases a
// CUDA block runs (stage its groups' run into a tile, quantize or decode the tile's groups, write
// the tile back), thread by thread, give the CPU kernel's bytes for the plain tensor, and decode
// (values, and an activation's backward against an NHWC gradient) to the plain tensor's floats in
// NHWC, for per-plane, per-sample and flat groups. On a GPU, StoreCuda.GroupsOfAnNhwcTensorAreThePlainTensors
// runs the kernels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/pointwise_math.h"
#include "core/tensor.h"
#include "quant/group_quant.h"
#include "quant/nhwc_tile.h"
#include "tests/support/emulated_gpu.h"

namespace packrat {
namespace {

using testing::EmulatedGpu;

struct Case {
  int64_t n, c, h, w;
  int64_t group_size;
  Grouping grouping = Grouping::PerPlane;
  std::string name() const {
    return fmt::format("({}, {}, {}, {}) {} groups of {}", n, c, h, w, grouping_name(grouping), group_size);
  }
};
// Per plane: planes of 99 (4 groups of 25 at G = 32), 1024 (4 groups of 256), 64 (4 planes to a
// group of 256), 49 (groups of 49 at G = 64), 9 (7 planes to a group of 63, a short last group a
// sample). Per sample: groups within a channel (planes of 1024), of 4 channels (planes of 64), across
// channels' edges (planes of 49, G = 64), with a short last group a sample (297 values, G = 100).
// Flat: groups across samples' edges.
const Case kCases[] = {{4, 3, 9, 11, 32},
                       {2, 8, 32, 32, 256},
                       {3, 12, 8, 8, 256},
                       {2, 20, 7, 7, 64},
                       {2, 32, 3, 3, 64},
                       {2, 8, 32, 32, 256, Grouping::PerSample},
                       {3, 12, 8, 8, 256, Grouping::PerSample},
                       {2, 20, 7, 7, 64, Grouping::PerSample},
                       {3, 3, 9, 11, 100, Grouping::PerSample},
                       {3, 5, 7, 9, 128, Grouping::Flat}};
const QuantNoise kNoise{0x71E5ull, quant_stream(4, 2)};

std::vector<float> random_values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 6.0f * s.uniform();
  return v;
}

// The NHWC buffer of a plain (N, C, P) tensor.
std::vector<float> to_nhwc(const std::vector<float>& plain, int64_t n, int64_t c, int64_t p) {
  std::vector<float> out(plain.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < p; ++i) out[static_cast<size_t>((s * p + i) * c + k)] = plain[static_cast<size_t>((s * c + k) * p + i)];
  return out;
}

GroupGeometry geometry_of(const Case& k, int bits) {
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = k.group_size;
  c.grouping = k.grouping;
  return group_geometry(k.n * k.c * k.h * k.w, k.n, c, k.h * k.w);
}

// The codec's plan for a device's NHWC tensor: plain order under every grouping, staged where a
// block's groups and a plane fit the tile, else through a plain copy (never the buffer as it lies,
// whose groups would hold G / C pixels of every channel).
TEST(NhwcTile, AnNhwcTensorIsWalkedInPlainOrderUnderEveryGrouping) {
  EmulatedGpu gpu;
  auto order_of = [](const Shape& shape, Layout layout, const GroupQuantConfig& c) {
    const Tensor x = Tensor::empty(shape, DType::f32, layout, MemTag::Workspace, EmulatedGpu::device());
    return codec_order(x, group_geometry_of(x, c));
  };
  for (Grouping grouping : {Grouping::PerPlane, Grouping::PerSample, Grouping::Flat}) {
    GroupQuantConfig c;
    c.grouping = grouping;
    const std::string what(grouping_name(grouping));
    const CodecOrder staged = order_of({2, 8, 32, 32}, Layout::NHWC, c);
    EXPECT_TRUE(staged.blocking.nhwc) << what;
    EXPECT_EQ(staged.blocking.channels, 8) << what;
    EXPECT_EQ(staged.blocking.plane, 1024) << what;
    EXPECT_FALSE(staged.via_plain) << what;
    const CodecOrder large_planes = order_of({2, 3, 40, 40}, Layout::NHWC, c);
    EXPECT_FALSE(large_planes.blocking.nhwc) << what;
    EXPECT_TRUE(large_planes.via_plain) << what;
    const CodecOrder plain = order_of({2, 8, 32, 32}, Layout::Plain, c);
    EXPECT_EQ(plain.blocking.channels, 0) << what;
    EXPECT_FALSE(plain.via_plain) << what;
    c.group_size = 2048;  // over a tile's 1024-value groups
    EXPECT_TRUE(order_of({2, 8, 32, 32}, Layout::NHWC, c).via_plain) << what;
  }
}

// 5 channels: one element at a time (for_nhwc_run); 8 and 12: quads of 4 channels (for_nhwc_quads).
TEST(NhwcTile, StagingReadsAndWritesTheRunInPlainOrder) {
  for (const int64_t c : {5, 8, 12}) {
    const int64_t n = 3, p = 7 * 9, numel = n * c * p;
    const std::vector<float> plain = random_values(numel, 1), nhwc = to_nhwc(plain, n, c, p);
    const NhwcWalk walk{c, p};
    EXPECT_EQ(nhwc_in_quads(walk), c % 4 == 0);
    // Runs within a channel, across channels (partial at both ends), across samples, the whole
    // tensor, channels 5 .. 6 (a quad's middle).
    const ElementRun runs[] = {{10, 40},  {p - 3, 3 * p + 5}, {2 * c * p - 7, 2 * c * p + 70},
                               {0, numel}, {p, 2 * p},         {5 * p + 2, 7 * p - 1}};
    for (const ElementRun& run : runs)
      for (int threads : {1, 37, 128}) {
        const std::string what = fmt::format("{} channels, run [{}, {}), {} threads", c, run.begin, run.end, threads);
        std::vector<float> tile(static_cast<size_t>(run.end - run.begin), -99.0f);
        for (int t = 0; t < threads; ++t) nhwc_stage(walk, run, nhwc.data(), tile.data(), t, threads);
        for (int64_t i = 0; i < run.end - run.begin; ++i)
          ASSERT_EQ(tile[static_cast<size_t>(i)], plain[static_cast<size_t>(run.begin + i)]) << what << " element " << i;
        std::vector<float> back(static_cast<size_t>(numel), -99.0f);
        for (int t = 0; t < threads; ++t) nhwc_unstage(walk, run, tile.data(), back.data(), t, threads);
        const std::vector<float> expected_plain = [&] {
          std::vector<float> v(static_cast<size_t>(numel), -99.0f);
          for (int64_t e = run.begin; e < run.end; ++e) v[static_cast<size_t>(e)] = plain[static_cast<size_t>(e)];
          return v;
        }();
        // -99 stays -99 through the transpose, so outside the run nothing was written.
        ASSERT_EQ(back, to_nhwc(expected_plain, n, c, p)) << what;
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
      const NhwcWalk walk{k.c, p};
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

// A decode block, thread by thread: the values (StoreValues' tile twin), and an activation's
// backward against a staged NHWC gradient (ApplyDerivative's), written back to NHWC, are the plain
// tensor's dequantized values and one-pass backward in NHWC order.
TEST(NhwcTile, StagedBlocksDecodeToThePlainTensorsFloatsInNhwc) {
  using Gelu = ApplyDerivative<Activation<ActivationId::gelu>, false>;
  for (const Case& k : kCases) {
    const int64_t p = k.h * k.w, numel = k.n * k.c * p;
    const std::vector<float> plain = random_values(numel, static_cast<uint64_t>(numel));
    const std::vector<float> grad_plain = random_values(numel, 7), grad_nhwc = to_nhwc(grad_plain, k.n, k.c, p);
    const GroupGeometry g = geometry_of(k, 2);
    const NhwcWalk walk{k.c, p};
    std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta(static_cast<size_t>(g.meta_bytes()));
    quantize_groups(plain.data(), g, Rounding::Stochastic, kNoise, codes.data(), meta.data());
    std::vector<float> values_plain(static_cast<size_t>(numel)), gx_plain(static_cast<size_t>(numel));
    dequantize_groups(codes.data(), meta.data(), g, values_plain.data());
    const DequantizeQuadsBody<Gelu> plain_apply{codes.data(), meta.data(), g, Gelu{grad_plain.data(), gx_plain.data()}};
    for (int64_t group = 0; group < g.groups(); ++group) plain_apply(group, 0, 1);

    std::vector<float> values_nhwc(static_cast<size_t>(numel), -99.0f), gx_nhwc(static_cast<size_t>(numel), -99.0f);
    const int64_t per_block = nhwc_decode_block_groups(g);
    for (int64_t block = 0; block * per_block < g.groups(); ++block) {
      const NhwcBlock b = nhwc_block(g, per_block, block);
      ASSERT_LE(b.run.end - b.run.begin, kNhwcTileFloats) << k.name();
      std::vector<float> tile(kNhwcTileFloats, -99.0f);
      using Values = ShiftedSink<StoreValues>;
      const DequantizeQuadsBody<Values> decode{codes.data(), meta.data(), g,
                                               Values{on_tile(StoreValues{nullptr}, tile.data()), b.run.begin}};
      for (int t = 0; t < kNhwcBlockThreads; ++t) nhwc_decode_groups(g, b, decode, t, kNhwcBlockThreads);
      for (int t = 0; t < kNhwcBlockThreads; ++t) nhwc_unstage(walk, b.run, tile.data(), values_nhwc.data(), t, kNhwcBlockThreads);

      std::vector<float> grad_tile(kNhwcTileFloats, -99.0f);
      for (int t = 0; t < kNhwcBlockThreads; ++t)
        nhwc_stage(walk, b.run, grad_nhwc.data(), grad_tile.data(), t, kNhwcBlockThreads);
      using Backward = ShiftedSink<Gelu>;
      const DequantizeQuadsBody<Backward> apply{codes.data(), meta.data(), g,
                                                Backward{on_tile(Gelu{nullptr, nullptr}, grad_tile.data()), b.run.begin}};
      for (int t = 0; t < kNhwcBlockThreads; ++t) nhwc_decode_groups(g, b, apply, t, kNhwcBlockThreads);
      for (int t = 0; t < kNhwcBlockThreads; ++t)
        nhwc_unstage(walk, b.run, grad_tile.data(), gx_nhwc.data(), t, kNhwcBlockThreads);
    }
    const std::vector<float> want_values = to_nhwc(values_plain, k.n, k.c, p), want_gx = to_nhwc(gx_plain, k.n, k.c, p);
    EXPECT_EQ(std::memcmp(values_nhwc.data(), want_values.data(), want_values.size() * 4), 0) << k.name() << ": values";
    EXPECT_EQ(std::memcmp(gx_nhwc.data(), want_gx.data(), want_gx.size() * 4), 0) << k.name() << ": backward";
  }
}

}  // namespace
}  // namespace packrat
