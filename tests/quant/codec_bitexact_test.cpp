// The per-element reference of each codec (the PACKRAT_HD functions of quant/group/group_quant.h,
// quant/mixed/mixed_quant.h, quant/fewbit/fewbit_codec.h, run element by element, as a CUDA kernel runs them)
// and the CPU fast kernels write byte-identical codes and metadata and decode to bit-identical
// floats: for every per-group width, rounding mode, metadata type and grouping, for the mixed and
// deterministic bucket quantizers of both scale rules, and for the few-bit index of every
// shipped table, on sizes with tails. That is what makes the CUDA kernels (issue 11) bit-identical.
// The per-group kernels read bf16 and write it too: the codes of its f32 values, values rounded as
// Tensor::to rounds them.
// Also: a codec handed a tensor on another device is a clear error, never a copy to the host.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/cpu/layout.h"  // native_blocked_layout
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/cpu/plane_tiles.h"        // plane_tiles::tile_geometry
#include "quant/cpu/whole_plane_tiles.h"  // plane_tiles::applies_whole_planes
#include <cmath>

#include "autograd/pointwise.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/fewbit/fewbit_store.h"
#include "quant/group/group_quant.h"
#include "quant/group/group_store.h"
#include "quant/mixed/mixed_quant.h"
#include "tests/support/mixed_cases.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

// Values in [lo, hi), with a run of equal values (a constant group: step 0) and exact zeros.
std::vector<float> values(int64_t n, uint64_t seed, float lo = -3.0f, float hi = 5.0f) {
  PhiloxStream s(seed, 11);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * s.uniform();
  for (int64_t i = 0; i < n && i < 300; ++i) v[static_cast<size_t>(i)] = 0.75f;
  for (int64_t i = 400; i < n && i < 420; ++i) v[static_cast<size_t>(i)] = 0.0f;
  return v;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Index of the first differing byte, or -1.
int64_t first_difference(const uint8_t* a, const uint8_t* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return -1;
}

// A per-group configuration, and its words for a failure's message.
GroupQuantConfig group_config(int bits, int64_t G, Grouping grouping, MetaType meta, Rounding rounding) {
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = G;
  c.grouping = grouping;
  c.meta = meta;
  c.rounding = rounding;
  return c;
}
std::string config_words(const GroupQuantConfig& c) {
  return "bits " + std::to_string(c.bits) + " " + std::string(rounding_name(c.rounding)) + " " +
         std::string(meta_name(c.meta)) + " " + std::string(grouping_name(c.grouping)) + " G " +
         std::to_string(c.group_size);
}

// The bf16 twin of a per-group quantize of x (n values, laid out as `walk` says): x rounded to bf16
// and read as bf16 (autocast's saved tensors, read as they lie) gives the codes, metadata and range
// sums of its f32 values; dequantized into bf16, the f32 values rounded as Tensor::to(bf16) rounds
// them. "" when it holds, else what differs.
std::string bf16_twin_difference(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                                 const CodecWalk& walk) {
  const size_t n = static_cast<size_t>(g.numel);
  std::vector<bf16_t> x16(n);  // (n,) x rounded to bf16
  std::vector<float> xr(n);    // (n,) its f32 values
  for (size_t i = 0; i < n; ++i) {
    x16[i] = from_f32<bf16_t>(x[i]);
    xr[i] = to_f32(x16[i]);
  }
  std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes()), 0xEE), meta(static_cast<size_t>(g.meta_bytes()), 0xEE);
  std::vector<uint8_t> codes16(codes), meta16(meta);
  std::vector<double> range_sq, range_sq16;
  quantize_groups(xr.data(), g, rounding, noise, codes.data(), meta.data(), &range_sq, walk);
  quantize_groups(x16.data(), g, rounding, noise, codes16.data(), meta16.data(), &range_sq16, walk);
  if (codes != codes16) return "codes from bf16, byte " + std::to_string(first_difference(codes.data(), codes16.data(), g.code_bytes()));
  if (meta != meta16) return "metadata from bf16";
  for (size_t i = 0; i < range_sq.size(); ++i)
    if (range_sq[i] != range_sq16[i] && !(std::isnan(range_sq[i]) && std::isnan(range_sq16[i])))
      return "range sum of group " + std::to_string(i) + " from bf16";
  std::vector<float> out(n);
  std::vector<bf16_t> out16(n);
  dequantize_groups(codes.data(), meta.data(), g, out.data(), walk);
  dequantize_groups(codes.data(), meta.data(), g, out16.data(), walk);
  for (size_t i = 0; i < n; ++i)
    if (out16[i].bits != from_f32<bf16_t>(out[i]).bits)
      return "value " + std::to_string(i) + " dequantized into bf16: " + std::to_string(to_f32(out16[i])) + ", not " +
             std::to_string(out[i]) + " rounded";
  return "";
}

TEST(CodecBitExact, PerGroupKernelWritesTheReferenceBytesForEveryConfig) {
  // (samples, span, channel plane): spans that are not multiples of 8, 128 or the 256-element
  // chunk; planes above, below and across the group sizes (per-plane grouping).
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{3, 1013, 1013}, {1, 77, 11}, {4, 2051, 293}};
  for (int bits : {1, 2, 3, 4, 8})
    for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
      for (MetaType meta : {MetaType::BF16, MetaType::F32})
        for (Grouping grouping : {Grouping::PerSample, Grouping::Flat, Grouping::PerPlane})
          for (int64_t G : {int64_t{7}, int64_t{256}, int64_t{300}, int64_t{1000}})
            for (const auto& [samples, span, plane] : shapes) {
              const GroupQuantConfig c = group_config(bits, G, grouping, meta, rounding);
              const std::string what = config_words(c) + " numel " + std::to_string(samples * span);
              const int64_t n = samples * span;
              std::vector<float> x = values(n, static_cast<uint64_t>(bits * 131 + G));
              // Non-finite values: a NaN group's metadata (a NaN first value, a NaN later), infinities.
              for (const auto& [i, v] : {std::pair<int64_t, float>{1000, NAN}, {1101, NAN}, {1207, INFINITY},
                                         {1309, -INFINITY}, {1400, INFINITY}, {1401, -INFINITY}})
                if (i < n) x[static_cast<size_t>(i)] = v;
              const GroupGeometry g = group_geometry(n, samples, c, plane);
              const QuantNoise noise{0x1234ABCDull, quant_stream(5, 3)};
              std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta_b(static_cast<size_t>(g.meta_bytes()));
              std::vector<double> range_sq;
              quantize_groups(x.data(), g, rounding, noise, codes.data(), meta_b.data(), &range_sq);

              std::vector<uint8_t> ref_codes(codes.size(), 0xEE), ref_meta(meta_b.size(), 0xEE);
              const int mb = meta_bytes_per_group(meta);
              for (int64_t gi = 0; gi < g.groups(); ++gi) {
                const double rs =
                    quantize_group(x.data() + g.group_start(gi), g.group_len(gi), static_cast<uint64_t>(g.group_start(gi)),
                                   bits, meta, rounding, noise, ref_meta.data() + gi * mb,
                                   ref_codes.data() + g.group_code_offset(gi));
                const double got = range_sq[static_cast<size_t>(gi)];
                if (!(std::isnan(rs) && std::isnan(got))) {
                  ASSERT_EQ(rs, got) << what << " group " << gi;
                }
              }
              ASSERT_EQ(first_difference(codes.data(), ref_codes.data(), g.code_bytes()), -1) << what << ": codes";
              ASSERT_EQ(first_difference(meta_b.data(), ref_meta.data(), g.meta_bytes()), -1) << what << ": metadata";

              std::vector<float> out(static_cast<size_t>(n)), ref_out(static_cast<size_t>(n));
              dequantize_groups(codes.data(), meta_b.data(), g, out.data());
              for (int64_t gi = 0; gi < g.groups(); ++gi)
                dequantize_group(codes.data() + g.group_code_offset(gi), meta_b.data() + gi * mb, g.group_len(gi), bits,
                                 meta, ref_out.data() + g.group_start(gi));
              ASSERT_TRUE(same_floats(out, ref_out)) << what << ": dequantized values";
              ASSERT_EQ(bf16_twin_difference(x.data(), g, rounding, noise, CodecWalk{}), "") << what;
            }
}

// Per-plane and per-sample groups of a blocked buffer (the CPU's convolution outputs: nChw16c
// with AVX-512, nChw8c without) are the plain tensor's: the same codes, metadata and range sums as
// the reference writes for the plain tensor, and the same values back in the blocked layout. With
// AVX-512 or AVX2 the per-plane groups of a tile's 16 or 8 planes are taken together
// (quant/cpu/plane_tiles.h), for planes whose groups are full and cut short, a NaN first value in
// some lanes and not in others, per-sample groups that cut every plane into whole groups as well;
// groups of several small planes (4 x 4, 2 x 2) k adjacent lanes
// (quant/cpu/whole_plane_tiles.h: a NaN first in a group's later lane, zeros of both signs at a
// group's extreme in two of its lanes); others (1 x 1 planes, groups not of whole planes) take the
// plain walk.

TEST(CodecBitExact, PlaneGroupsOfABlockedBufferAreThePlainTensorsBytes) {
  const std::vector<Shape> shapes = {{2, 32, 7, 7}, {3, 16, 14, 14}, {4, 32, 28, 28}, {1, 48, 5, 5},
                                     {2, 16, 9, 11}, {3, 32, 4, 4},   {2, 48, 2, 2},   {2, 64, 1, 1},
                                     {2, 32, 8, 8},   {2, 16, 16, 16}, {1, 16, 32, 32}, {2, 128, 2, 2},
                                     {1, 256, 1, 1},  {4, 64, 1, 2},  {4, 128, 1, 1}};
  int vertical = 0;  // cases whose groups the tiles take a lane each
  int whole = 0;     // cases whose groups of whole planes the tiles take k lanes each
  int per_sample = 0;  // per-sample groups cutting every plane into whole groups, a lane each
  int long_lanes = 0;  // groups of whole planes whose lanes hold over 8 bytes of codes
  int bit_lanes = 0;   // groups of whole planes whose lanes' codes are not whole bytes (store_lane_bits)
  int whole_tiles = 0;  // groups of whole planes spanning two or more tiles
  int nhwc_tiles = 0;  // NHWC cases the tiles take
  int nhwc_whole = 0;  // NHWC cases whose groups of whole planes the tiles take
  int odd_planes = 0;  // stochastic cases the tiles take on planes of an odd size (TileNoise::fill_by_lanes' word-a-row path)
  int64_t cases = 0;
  for (int bits : {1, 2, 3, 4, 8})
    for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
      for (MetaType meta : {MetaType::BF16, MetaType::F32})
        for (Grouping grouping : {Grouping::PerPlane, Grouping::PerSample})
          for (int64_t G : {int64_t{7}, int64_t{32}, int64_t{64}, int64_t{256}, int64_t{300}})
            for (const Shape& shape : shapes) {
              const GroupQuantConfig c = group_config(bits, G, grouping, meta, rounding);
              const std::string what0 = config_words(c) + " " + shape.str();
              const int64_t n = shape.numel(), plane = shape[2] * shape[3];
              Tensor plain = Tensor::empty(shape);  // (N, C, H, W)
              const std::vector<float> v = values(n, static_cast<uint64_t>(bits * 7 + G));
              std::memcpy(plain.data<float>(), v.data(), static_cast<size_t>(n) * sizeof(float));
              // Zeros of both signs among the first 300 values (all 0.75): which one is a group's
              // minimum is the plain scan's first (a -0 early in a later plane, a +0 late in an
              // earlier one).
              for (const auto& [i, x] : {std::pair<int64_t, float>{plane - 1, 0.0f}, {plane + 1, -0.0f},
                                         {3 * plane, NAN}, {5 * plane + 2, NAN},
                                         {7 * plane + 1, INFINITY}, {9 * plane + 3, -INFINITY}})
                if (i < n) plain.data<float>()[i] = x;
              // NHWC: channels-last activations, walked as one block of all C channels.
              for (const Layout layout : {cpu::native_blocked_layout(), Layout::NHWC}) {
              const std::string what = what0 + " " + std::string(layout_name(layout));
              const Tensor blocked = plain.to_layout(layout);
              const GroupGeometry g = group_geometry(n, shape[0], c, plane);
              const CodecWalk walk = layout == Layout::NHWC ? nhwc_as_blocked(shape)
                                                            : CodecWalk{shape[1], plane, false, channel_block(layout)};
  #if defined(PACKRAT_PLANE_TILES)
              nhwc_tiles += layout == Layout::NHWC && plane_tiles::tile_geometry(g, walk).spans > 0 ? 1 : 0;
              nhwc_whole += layout == Layout::NHWC && plane_tiles::applies_whole_planes(g, walk) ? 1 : 0;
              vertical += plane_tiles::tile_geometry(g, walk).spans > 0 ? 1 : 0;
              whole += plane_tiles::applies_whole_planes(g, walk) ? 1 : 0;
              per_sample += grouping == Grouping::PerSample && plane_tiles::tile_geometry(g, walk).spans > 0 ? 1 : 0;
              long_lanes += plane_tiles::applies_whole_planes(g, walk) && bits * plane > 64 ? 1 : 0;
              bit_lanes += plane_tiles::applies_whole_planes(g, walk) && bits * plane % 8 != 0 ? 1 : 0;
              whole_tiles += plane_tiles::applies_whole_planes(g, walk) && G / plane > plane_tiles::kLanes ? 1 : 0;
              odd_planes += rounding == Rounding::Stochastic && plane % 2 == 1 &&
                                    plane_tiles::tile_geometry(g, walk).spans > 0
                                ? 1
                                : 0;
  #endif
              // A stream a case: a thread's TileNoise, kept from one call to the next, must not
              // hand a case the noise blocks it held for the one before.
              const QuantNoise noise{0x5EEDull, quant_stream(2, static_cast<uint64_t>(++cases))};
              std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes()), 0xEE), meta_b(static_cast<size_t>(g.meta_bytes()), 0xEE);
              std::vector<double> range_sq;
              quantize_groups(blocked.data<float>(), g, rounding, noise, codes.data(), meta_b.data(), &range_sq, walk);

              std::vector<uint8_t> ref_codes(codes.size(), 0xEE), ref_meta(meta_b.size(), 0xEE);
              const int mb = meta_bytes_per_group(meta);
              for (int64_t gi = 0; gi < g.groups(); ++gi) {
                const double rs = quantize_group(plain.data<float>() + g.group_start(gi), g.group_len(gi),
                                                 static_cast<uint64_t>(g.group_start(gi)), bits, meta, rounding, noise,
                                                 ref_meta.data() + gi * mb, ref_codes.data() + g.group_code_offset(gi));
                const double got = range_sq[static_cast<size_t>(gi)];
                if (!(std::isnan(rs) && std::isnan(got))) {
                  ASSERT_EQ(rs, got) << what << " group " << gi;
                }
              }
              ASSERT_EQ(first_difference(codes.data(), ref_codes.data(), g.code_bytes()), -1) << what << ": codes";
              ASSERT_EQ(first_difference(meta_b.data(), ref_meta.data(), g.meta_bytes()), -1) << what << ": metadata";

              Tensor out = Tensor::empty(shape, DType::f32, layout);
              dequantize_groups(codes.data(), meta_b.data(), g, out.data<float>(), walk);
              std::vector<float> ref_out(static_cast<size_t>(n));
              for (int64_t gi = 0; gi < g.groups(); ++gi)
                dequantize_group(codes.data() + g.group_code_offset(gi), meta_b.data() + gi * mb, g.group_len(gi), bits, meta,
                                 ref_out.data() + g.group_start(gi));
              const Tensor back = out.to_plain();
              ASSERT_EQ(std::memcmp(back.data<float>(), ref_out.data(), static_cast<size_t>(n) * sizeof(float)), 0)
                  << what << ": dequantized values";
              ASSERT_EQ(bf16_twin_difference(blocked.data<float>(), g, rounding, noise, walk), "") << what;
              }
            }
#if defined(PACKRAT_PLANE_TILES)
  // The cases this test is for, where the layout's tiles are this build's rows (an AVX2 build on a
  // CPU whose oneDNN runs AVX-512 gets nChw16c buffers, which take the plain walk).
  if (channel_block(cpu::native_blocked_layout()) == plane_tiles::kLanes) {
    EXPECT_GE(vertical, 5 * 2 * 2 * 3 * 3);  // per plane: every width, rounding, metadata, G and plane of 49 to 784
    // 4x4 planes at 1 to 4 bits and 2x2 at 2, 4, 8 (groups of 32; 64 too where a tile has 16
    // lanes), per plane and per sample, every rounding and metadata
    EXPECT_GE(whole, 2 * 2 * 2 * (4 * 2 + 3));
    EXPECT_GE(per_sample, 5 * 2 * 2 * 3);  // groups of 7 on 28x28 planes, of 32 and 64 on 8x8
    EXPECT_GE(long_lanes, 2 * 2 * 2 * 2);  // 4x4 planes at 8 bits, groups of 32 and 64
    // 2x2 planes at 1 and 3 bits, 1x1 at 1 to 4 (groups of 32: four tiles or two), per plane and per
    // sample, every rounding and metadata
    EXPECT_GE(bit_lanes, 2 * 2 * 2 * (2 + 4));
  }
  // NHWC's tiles: every case whose channels the lanes divide and whose groups lie in planes
  EXPECT_GE(nhwc_tiles, 5 * 2 * 2 * 3 * 3);
  EXPECT_GE(nhwc_whole, 2 * 2 * 2 * (4 * 2 + 3));
  // Per-sample groups of 256 on 2x2 planes at 2, 4 and 8 bits and on 1x1 planes at 8 (4 tiles or
  // more whatever the lanes), every rounding and metadata, NHWC (and blocked where its tiles are
  // the rows: twice as many)
  EXPECT_GE(whole_tiles, 2 * 2 * (3 + 1));
  // 7x7, 5x5 and 9x11 planes: every width and metadata, per plane with G 7, 32 and 64, blocked and NHWC
  EXPECT_GE(odd_planes, 5 * 2 * 3 * 3 * 2);
#else
  (void)vertical, (void)whole, (void)per_sample, (void)long_lanes, (void)bit_lanes, (void)whole_tiles;
  (void)nhwc_tiles, (void)nhwc_whole, (void)odd_planes;
#endif
}

#if defined(PACKRAT_PLANE_TILES)
// A tile's noise rows are rounding_noise16 of its lanes' planes, element by element: planes of an
// even size (a hash two rows) and an odd one (a hash a row, each lane its half by its parity), and
// tiles whose words cross a multiple of 2^32 (the index's high half changes within the tile).
TEST(CodecBitExact, TileNoiseRowsAreTheReferenceNoise) {
  const QuantNoise noise{0x5EEDull, quant_stream(9, 4)};
  for (const int64_t plane : {int64_t{1}, int64_t{2}, int64_t{49}, int64_t{196}, int64_t{256}})
    for (const int64_t tile : {int64_t{0}, int64_t{3}, (int64_t{1} << 33) / (plane_tiles::kLanes * plane)}) {
      const int64_t e0 = tile * plane_tiles::kLanes * plane;
      const uint32_t* rows = plane_tiles::TileNoise::of_thread(noise, plane).fill(e0);  // (plane, lanes)
      for (int64_t i = 0; i < plane; ++i)
        for (int64_t c = 0; c < plane_tiles::kLanes; ++c)
          ASSERT_EQ(rows[i * plane_tiles::kLanes + c],
                    rounding_noise16(noise.seed, noise.stream, static_cast<uint64_t>(e0 + c * plane + i)))
              << "plane " << plane << " tile " << tile << " row " << i << " lane " << c;
    }
}
#endif

// Per-sample groups of 256 on 2x2 planes, 64 planes a group: 8 tiles of 8 lanes or 4 of 16
// (quantize_whole_tiles). A zero extreme's sign is the plain scan's first zero even where the two
// zeros lie in different tiles: sample 0 all 0.75 with +0 in the first tile and -0 in a later one
// (its minimum +0), sample 1 all -0.75 with -0 first and +0 later (its maximum -0), each with a NaN
// that is not the group's first value (skipped, as the scan skips it).
TEST(CodecBitExact, GroupsOfWholeTilesTakeThePlainScansFirstExtreme) {
  const Shape shape{2, 64, 2, 2};  // (N, C, H, W): one group of 256 a sample
  const int64_t n = shape.numel(), plane = 4;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i < 256 ? 0.75f : -0.75f;
  for (const auto& [i, x] : {std::pair<int64_t, float>{31, 0.0f}, {70, -0.0f}, {100, NAN},
                             {256 + 30, -0.0f}, {256 + 200, 0.0f}, {256 + 7, NAN}})
    v[static_cast<size_t>(i)] = x;
  Tensor plain = Tensor::from_vector(shape, v);
  for (MetaType meta : {MetaType::BF16, MetaType::F32})
    for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest})
      for (const Layout layout : {cpu::native_blocked_layout(), Layout::NHWC}) {
        const GroupQuantConfig c = group_config(2, 256, Grouping::PerSample, meta, rounding);
        const std::string what = config_words(c) + " " + std::string(layout_name(layout));
        const GroupGeometry g = group_geometry(n, shape[0], c, plane);
        const CodecWalk walk = layout == Layout::NHWC ? nhwc_as_blocked(shape)
                                                      : CodecWalk{shape[1], plane, false, channel_block(layout)};
        const Tensor blocked = plain.to_layout(layout);
        const QuantNoise noise{0x5EEDull, quant_stream(4, 1)};
        std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta_b(static_cast<size_t>(g.meta_bytes()));
        quantize_groups(blocked.data<float>(), g, rounding, noise, codes.data(), meta_b.data(), nullptr, walk);
        std::vector<uint8_t> ref_codes(codes.size()), ref_meta(meta_b.size());
        const int mb = meta_bytes_per_group(meta);
        for (int64_t gi = 0; gi < g.groups(); ++gi)
          quantize_group(v.data() + g.group_start(gi), g.group_len(gi), static_cast<uint64_t>(g.group_start(gi)), 2, meta,
                         rounding, noise, ref_meta.data() + gi * mb, ref_codes.data() + g.group_code_offset(gi));
        ASSERT_EQ(meta_b, ref_meta) << what << ": metadata";
        ASSERT_EQ(codes, ref_codes) << what << ": codes";
        Tensor out = Tensor::empty(shape, DType::f32, layout);
        dequantize_groups(codes.data(), meta_b.data(), g, out.data<float>(), walk);
        std::vector<float> ref_out(static_cast<size_t>(n));
        for (int64_t gi = 0; gi < g.groups(); ++gi)
          dequantize_group(codes.data() + g.group_code_offset(gi), meta_b.data() + gi * mb, g.group_len(gi), 2, meta,
                           ref_out.data() + g.group_start(gi));
        ASSERT_TRUE(same_floats(out.to_plain().to_vector(), ref_out)) << what << ": dequantized values";
      }
}

using testing::MixedCase;
using testing::mixed_cases;

TEST(CodecBitExact, MixedAndDeterministicBucketKernelsWriteTheReferenceBytes) {
  for (const MixedCase& mc : mixed_cases())
    for (int64_t n : {int64_t{1}, int64_t{3037}, int64_t{20000}}) {
      const MixedQuantConfig& c = mc.c;
      const std::string what = mc.name + " numel " + std::to_string(n);
      const std::vector<float> x = values(n, static_cast<uint64_t>(n) + c.base.code_bits);
      const QuantNoise noise{99, quant_stream(7, 2)};
      const MixedPacked p = quantize_mixed(x.data(), n, c, noise);

      const BucketGeometry g = bucket_geometry(n, c.bucket_size);
      std::vector<uint8_t> flags(static_cast<size_t>(g.buckets));  // (buckets,)
      for (int64_t b = 0; b < g.buckets; ++b)
        flags[static_cast<size_t>(b)] = bucket_takes_mix(c, noise.seed, noise.stream, static_cast<uint64_t>(b)) ? 1 : 0;
      std::vector<uint8_t> held(static_cast<size_t>(g.buckets), p.uniform_is_mix ? 1 : 0);
      if (!p.uniform) unpack_bits(p.flags.data<uint8_t>(), g.buckets, 1, held.data());
      ASSERT_EQ(held, flags) << what << ": bucket decisions";

      const int mb = bucket_meta_bytes(c.scale, c.meta);
      std::vector<uint8_t> ref_codes(static_cast<size_t>(p.codes.numel()), 0xEE);
      std::vector<uint8_t> ref_meta(static_cast<size_t>(g.buckets * mb), 0xEE);
      std::vector<int64_t> off(static_cast<size_t>(g.buckets + 1), 0);  // (buckets + 1,) code offsets
      for (int64_t b = 0; b < g.buckets; ++b) {
        const BucketWidth& w = flags[static_cast<size_t>(b)] ? c.mix : c.base;
        off[static_cast<size_t>(b + 1)] = off[static_cast<size_t>(b)] + packed_bytes(g.len(b), w.code_bits);
        ASSERT_LE(off[static_cast<size_t>(b + 1)], p.codes.numel()) << what;
        quantize_bucket_ref(x.data() + g.start(b), g.len(b), w, c.scale, c.rounding, c.meta,
                            QuantNoise{noise.seed, bucket_stream(noise.stream, static_cast<uint64_t>(b))},
                            ref_meta.data() + b * mb, ref_codes.data() + off[static_cast<size_t>(b)]);
      }
      ASSERT_EQ(off.back(), p.codes.numel()) << what;
      ASSERT_EQ(first_difference(p.codes.data<uint8_t>(), ref_codes.data(), p.codes.numel()), -1) << what << ": codes";
      ASSERT_EQ(first_difference(p.meta_data.data<uint8_t>(), ref_meta.data(), p.meta_data.numel()), -1)
          << what << ": metadata";

      std::vector<float> out(static_cast<size_t>(n)), ref_out(static_cast<size_t>(n));
      dequantize_mixed(p, out.data());
      for (int64_t b = 0; b < g.buckets; ++b)
        dequantize_bucket_ref(p.codes.data<uint8_t>() + off[static_cast<size_t>(b)], g.len(b),
                              flags[static_cast<size_t>(b)] ? c.mix : c.base, c.scale, c.meta,
                              p.meta_data.data<uint8_t>() + b * mb, ref_out.data() + g.start(b));
      ASSERT_TRUE(same_floats(out, ref_out)) << what << ": dequantized values";
    }
}

// The mixed bucket kernels read bf16 as it lies (autocast's saved tensors on the CPU) and write
// it: the codes, metadata and flags of its f32 values, and those values' dequantized floats
// rounded as Tensor::to rounds them, plain and in the CPU's blocked layout.
TEST(CodecBitExact, MixedBucketKernelsReadAndWriteBf16AsTheirF32Values) {
  const Shape shape{3, 32, 7, 7};  // (N, C, H, W)
  for (const MixedCase& mc : mixed_cases())
    for (const Layout layout : {Layout::Plain, cpu::native_blocked_layout()}) {
      const std::string what = mc.name + " " + std::string(layout_name(layout));
      Tensor plain = Tensor::empty(shape);
      const std::vector<float> v = values(shape.numel(), 5);
      std::memcpy(plain.data<float>(), v.data(), v.size() * sizeof(float));
      const Tensor x16 = plain.to_layout(layout).to(DType::bf16), x32 = x16.to(DType::f32);
      const QuantNoise noise{99, quant_stream(7, 3)};
      const MixedPacked a = quantize_mixed(x32, mc.c, noise), b = quantize_mixed(x16, mc.c, noise);
      ASSERT_EQ(a.codes.numel(), b.codes.numel()) << what;
      ASSERT_EQ(first_difference(a.codes.data<uint8_t>(), b.codes.data<uint8_t>(), a.codes.numel()), -1) << what << ": codes";
      ASSERT_EQ(first_difference(a.meta_data.data<uint8_t>(), b.meta_data.data<uint8_t>(), a.meta_data.numel()), -1)
          << what << ": metadata";
      ASSERT_EQ(a.mix_buckets, b.mix_buckets) << what;
      Tensor out32 = Tensor::empty(shape, DType::f32, layout), out16 = Tensor::empty(shape, DType::bf16, layout);
      dequantize_mixed(a, out32);
      dequantize_mixed(a, out16);
      EXPECT_EQ(std::memcmp(out16.raw(), out32.to(DType::bf16).raw(), out16.nbytes()), 0) << what << ": values";
    }
}

// Packs codes[0..n) at `bits` block by block with the per-block helpers (the reference layout).
std::vector<uint8_t> pack_reference(const std::vector<uint32_t>& codes, int bits) {
  const int64_t n = static_cast<int64_t>(codes.size());
  std::vector<uint8_t> out(static_cast<size_t>(packed_bytes(n, bits)));
  for (int64_t b = 0; b < n; b += 8) {
    const int m = static_cast<int>(std::min<int64_t>(8, n - b));
    uint64_t w = 0;
    for (int k = 0; k < m; ++k) w |= block_put(codes[static_cast<size_t>(b + k)], k, bits);
    store_block8(w, static_cast<int>(packed_bytes(m, bits)), out.data() + (b / 8) * bits);
  }
  return out;
}

TEST(CodecBitExact, FewBitIndexAndBackwardMatchTheReferenceForEveryShippedTable) {
  for (const FewbitTable& t : shipped_fewbit_tables())
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{513}, int64_t{40003}}) {
      const std::string what = t.fn + " " + std::to_string(t.bits) + "-bit numel " + std::to_string(n);
      FewbitCoder c;
      c.kind = FewbitKind::Table;
      c.bits = t.bits;
      c.lut = t.lut();
      std::vector<float> x = values(n, static_cast<uint64_t>(n) * 7 + t.bits, -12.0f, 12.0f);
      // The comparisons' edges, every 3rd value from 5 on (in the SIMD blocks and the tails): each
      // border exactly and a float either side of it, the centre, NaN, the infinities and -0.
      std::vector<float> edges = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, -0.0f, c.lut.center};
      for (int j = 0; j < c.lut.num_borders; ++j)
        for (float b : {c.lut.borders[j], c.lut.center + c.lut.borders[j], c.lut.center - c.lut.borders[j]})
          edges.insert(edges.end(), {b, std::nextafter(b, -INFINITY), std::nextafter(b, INFINITY)});
      for (size_t k = 0; k < edges.size() && 5 + 3 * k < x.size(); ++k) x[5 + 3 * k] = edges[k];
      std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n, c.bits)));
      fewbit_encode(c, nullptr, x.data(), sizeof(float), nullptr, n, packed.data());
      std::vector<uint32_t> codes(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) codes[static_cast<size_t>(i)] = fewbit_index(c.lut, x[static_cast<size_t>(i)]);
      ASSERT_EQ(packed, pack_reference(codes, c.bits)) << what << ": codes";

      const std::vector<float> g = values(n, 5, -1.0f, 1.0f);
      std::vector<float> out(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      fewbit_decode(c, packed.data(), g.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ref[static_cast<size_t>(i)] =
            fewbit_apply(c.kind, c.lut.levels, packed_code_at(packed.data(), i, c.bits), g[static_cast<size_t>(i)]);
      ASSERT_TRUE(same_floats(out, ref)) << what << ": backward";
      fewbit_decode(c, packed.data(), nullptr, out.data(), n);
      for (int64_t i = 0; i < n; ++i) ref[static_cast<size_t>(i)] = c.lut.levels[packed_code_at(packed.data(), i, c.bits)];
      ASSERT_TRUE(same_floats(out, ref)) << what << ": load";
    }
}

TEST(CodecBitExact, FewBitMaskCodesMatchTheReference) {
  for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{40003}}) {
    FewbitCoder c;
    c.kind = FewbitKind::Mask;
    c.bits = 1;
    std::vector<uint8_t> m(static_cast<size_t>(n));
    PhiloxStream s(3, 1);
    for (auto& v : m) v = static_cast<uint8_t>(s.below(3));  // 0, 1 or 2: nonzero is kept
    std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n, 1)));
    fewbit_encode(c, nullptr, m.data(), 1, nullptr, n, packed.data());
    std::vector<uint32_t> codes(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) codes[static_cast<size_t>(i)] = m[static_cast<size_t>(i)] != 0 ? 1 : 0;
    ASSERT_EQ(packed, pack_reference(codes, 1)) << n;
    const std::vector<float> g = values(n, 6, -1.0f, 1.0f);
    std::vector<float> out(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
    fewbit_decode(c, packed.data(), g.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ref[static_cast<size_t>(i)] = fewbit_apply(c.kind, c.lut.levels, codes[static_cast<size_t>(i)], g[static_cast<size_t>(i)]);
    ASSERT_TRUE(same_floats(out, ref)) << n;
  }
}

// ---- device dispatch ----------------------------------------------------------------------------

// A CPU tensor relabelled as living on cuda:0: reaches the codecs' device dispatch without a GPU
// (its bytes stay on the host, so nothing can crash if a check were missing). Restored on exit.
class OnCuda {
 public:
  explicit OnCuda(const Tensor& t) : t_(t) { t_.storage()->device = Device::cuda(0); }
  ~OnCuda() { t_.storage()->device = Device::cpu(); }

 private:
  Tensor t_;
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CodecDevice, CodecEntryPointsOnAnotherDeviceAreAClearError) {
  Tensor x = Tensor::from_vector(Shape{4, 64}, values(256, 1));
  GroupQuantConfig c;
  const GroupGeometry g = group_geometry(x.numel(), 4, c);
  Tensor codes = Tensor::empty(Shape{g.code_bytes()}, DType::u8), meta = Tensor::empty(Shape{g.meta_bytes()}, DType::u8);
  quantize_groups(x, g, Rounding::Stochastic, {1, 2}, codes, meta);  // the CPU: runs
  {
    // The per-group codec has CUDA kernels (GroupQuantDevice.*): operands on two devices are an
    // error; all three relabelled reach the kernel, which without a GPU cannot launch.
    OnCuda on(x);
    std::string m = testing::message_of([&] { quantize_groups(x, g, Rounding::Stochastic, {1, 2}, codes, meta); });
    EXPECT_EQ(m, "quantize_groups: input on cuda:0, codes on cpu, metadata on cpu");
    if (available_backends().size() == 1) {  // no GPU: a relabelled host buffer must never reach a real one
      OnCuda c(codes), d(meta);
      m = testing::message_of([&] { quantize_groups(x, g, Rounding::Stochastic, {1, 2}, codes, meta); });
      EXPECT_TRUE(starts_with(m, PACKRAT_HAVE_CUDA ? "CUDA kernel of quantize_groups failed to launch"
                                                   : "quantize_groups: the input is on cuda:0, but this packrat was "
                                                     "built without CUDA"))
          << m;
    }
  }
  {
    OnCuda on(codes);
    const std::string m = testing::message_of([&] { dequantize_groups(codes, meta, g, Tensor::empty_like(x)); });
    EXPECT_EQ(m, "dequantize_groups: codes on cuda:0, metadata on cpu, output on cpu");
  }
  {
    // The mixed codec has CUDA kernels (MixedQuantDevice.*): its output on another device than
    // its codes is an error.
    const MixedPacked p = quantize_mixed(x, MixedQuantConfig{}, {1, 2});
    Tensor out = Tensor::empty_like(x);
    OnCuda on(out);
    const std::string m = testing::message_of([&] { dequantize_mixed(p, out); });
    EXPECT_EQ(m, "dequantize_mixed: codes on cpu, metadata on cpu, output on cuda:0");
  }
  {
    FewbitCoder fc;
    fc.lut = fewbit_table("gelu", 1).lut();
    Tensor packed = Tensor::empty(Shape{packed_bytes(x.numel(), 1)}, DType::u8);
    OnCuda on(x);  // the few-bit codec has CUDA kernels (FewbitDevice.*): operands on two devices are an error
    const std::string m = testing::message_of([&] { fewbit_encode(fc, nullptr, x, Tensor(), packed); });
    EXPECT_EQ(m, "fewbit encode: input on cuda:0, codes on cpu");
  }
}

}  // namespace
}  // namespace packrat
