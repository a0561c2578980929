// Per-group quantizer: bf16 helpers, round trip for every bit-width / group size / tail,
// byte formula, unbiasedness and the variance bound of stochastic rounding, exactness of
// round-to-nearest on the grid, and the SIMD kernel against the scalar host/device helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "quant/group/group_quant.h"

namespace packrat {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed, float lo, float hi) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * s.uniform();
  return v;
}

struct Quantized {
  GroupGeometry g;
  std::vector<uint8_t> codes, meta;
  std::vector<float> out;
};

Quantized run(const std::vector<float>& x, int64_t samples, const GroupQuantConfig& c, QuantNoise noise = {1, 2}) {
  Quantized q;
  q.g = group_geometry(static_cast<int64_t>(x.size()), samples, c);
  q.codes.assign(static_cast<size_t>(q.g.code_bytes()), 0xAB);
  q.meta.assign(static_cast<size_t>(q.g.meta_bytes()), 0xCD);
  quantize_groups(x.data(), q.g, c.rounding, noise, q.codes.data(), q.meta.data());
  q.out.assign(x.size(), NAN);
  dequantize_groups(q.codes.data(), q.meta.data(), q.g, q.out.data());
  return q;
}

GroupParams params_of(const Quantized& q, int64_t g) {
  return load_group_meta(q.meta.data() + g * meta_bytes_per_group(q.g.meta), q.g.meta);
}

TEST(GroupQuantBf16, ConversionsRoundAsDocumented) {
  for (float x : {1.0f, -2.5f, 3.14159f, -0.001234f, 65504.0f, 1e-30f, -7.77e20f, 0.0f}) {
    const float down = bf16_to_f32(f32_to_bf16_down(x)), up = bf16_to_f32(f32_to_bf16_up(x));
    const float near = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(down, x) << x;
    EXPECT_GE(up, x) << x;
    EXPECT_LE(up - down, std::abs(x) * (1.0f / 64.0f)) << x;  // adjacent bf16 values (8 significant bits)
    EXPECT_TRUE(near == down || near == up) << x;
    EXPECT_LE(std::abs(near - x), std::abs(x) * (1.0f / 256.0f) + 1e-38f) << x;
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);  // exactly representable
  EXPECT_EQ(f32_to_bf16(bf16_to_f32(0x3F81)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

// A NaN group's metadata is the same bytes whatever NaN the device's arithmetic made: a GPU's
// (mx - mn) of NaNs is 0x7FFFFFFF, whose bf16 rounded up by its bits was -0.0 (H200, session 45),
// the CPU's keeps the operand's payload.
TEST(GroupQuantBf16, EveryNanRoundsToOneQuietNanAndGivesOneMetadataRecord) {
  for (uint32_t bits : {0x7FC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F800001u, 0xFFC00000u}) {
    const float nan = f32_from_bits(bits);
    EXPECT_EQ(f32_to_bf16_up(nan), kBf16QuietNan) << std::hex << bits;
    EXPECT_EQ(f32_to_bf16_down(nan), kBf16QuietNan) << std::hex << bits;
    for (MetaType meta : {MetaType::BF16, MetaType::F32}) {
      std::vector<uint8_t> cpu(meta_bytes_per_group(meta)), other(cpu.size());
      store_group_meta(group_params(NAN, NAN, 2, meta), meta, cpu.data());
      store_group_meta(group_params(nan, nan, 2, meta), meta, other.data());
      if (meta == MetaType::BF16) {
        EXPECT_EQ(other, cpu) << std::hex << bits;
      } else {  // the min is the group's first value, kept as it is; the step is one NaN
        EXPECT_TRUE(std::equal(cpu.begin() + 4, cpu.end(), other.begin() + 4)) << std::hex << bits;
      }
      EXPECT_TRUE(std::isnan(load_group_meta(other.data(), meta).step)) << std::hex << bits;
    }
  }
}

// Independent formula: per span, full groups of ceil(G*b/8) bytes and one tail group.
int64_t expected_code_bytes(int64_t numel, int64_t spans, int64_t G, int bits) {
  const int64_t S = numel / spans, full = S / G, tail = S % G;
  return spans * (full * ((G * bits + 7) / 8) + (tail ? (tail * bits + 7) / 8 : 0));
}

TEST(GroupQuantRoundTrip, EveryBitWidthGroupSizeAndTail) {
  for (int bits : {1, 2, 3, 4, 8})
    for (int64_t G : {1, 5, 8, 64, 100, 256})
      for (auto [samples, per] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 517}, {4, 256}, {2, 37}})
        for (Grouping grouping : {Grouping::PerSample, Grouping::Flat})
          for (Rounding rounding : {Rounding::Nearest, Rounding::Stochastic}) {
            GroupQuantConfig c;
            c.bits = bits;
            c.group_size = G;
            c.grouping = grouping;
            c.rounding = rounding;
            c.meta = G == 100 ? MetaType::F32 : MetaType::BF16;
            const auto x = random_values(samples * per, static_cast<uint64_t>(bits * 1000 + G), -3.0f, 5.0f);
            const Quantized q = run(x, samples, c);
            const int64_t spans = grouping == Grouping::PerSample ? samples : 1;
            SCOPED_TRACE(testing::Message() << "bits " << bits << " G " << G << " shape " << samples << "x" << per
                                            << " " << grouping_name(grouping) << " " << rounding_name(rounding));
            ASSERT_EQ(q.g.code_bytes(), expected_code_bytes(samples * per, spans, G, bits));
            ASSERT_EQ(q.g.meta_bytes(), spans * ((per * samples / spans + G - 1) / G) * (G == 100 ? 8 : 4));
            for (int64_t gi = 0; gi < q.g.groups(); ++gi) {
              const GroupParams p = params_of(q, gi);
              for (int64_t i = q.g.group_start(gi); i < q.g.group_start(gi) + q.g.group_len(gi); ++i) {
                const float xi = x[static_cast<size_t>(i)], yi = q.out[static_cast<size_t>(i)];
                const float tol = (rounding == Rounding::Nearest ? 0.5f : 1.0f) * p.step * 1.0001f + 1e-6f;
                ASSERT_LE(std::abs(yi - xi), tol) << "element " << i;
                // on the group's grid, within its range
                if (p.step == 0.0f) {
                  ASSERT_EQ(yi, p.min);
                  continue;
                }
                const float k = std::round((yi - p.min) / p.step);
                ASSERT_NEAR(yi, p.min + k * p.step, 4e-7f * (std::abs(p.min) + 256 * p.step)) << "element " << i;
                ASSERT_GE(k, 0.0f);
                ASSERT_LE(k, static_cast<float>((1 << bits) - 1));
              }
            }
          }
}

TEST(GroupQuantRoundTrip, EmptyAndConstantTensors) {
  GroupQuantConfig c;
  EXPECT_EQ(run({}, 1, c).g.total_bytes(), 0);
  for (MetaType m : {MetaType::BF16, MetaType::F32}) {
    c.meta = m;
    const std::vector<float> x(300, 0.3f);  // 0.3 is not a bf16 value: min rounds down, step covers it
    const Quantized q = run(x, 1, c);
    double mean = 0;
    for (float y : q.out) {
      EXPECT_NEAR(y, 0.3f, 0.01f);
      mean += y;
    }
    EXPECT_NEAR(mean / 300, 0.3, 0.01);
    const std::vector<float> z(300, 0.25f);  // a bf16 value: exact
    for (float y : run(z, 1, c).out) EXPECT_EQ(y, 0.25f);
  }
}

TEST(GroupQuantRounding, NearestIsExactOnTheGrid) {
  for (int bits : {1, 2, 3, 4, 8}) {
    const int levels = (1 << bits) - 1;
    // Group [-2, -2 + levels * 0.5]: min and step are bf16 values, every grid point is hit.
    std::vector<float> x;
    for (int i = 0; i < 512; ++i) x.push_back(-2.0f + 0.5f * static_cast<float>((i * 7 + (i == 0 ? 0 : 1)) % (levels + 1)));
    x[0] = -2.0f;
    x[1] = -2.0f + 0.5f * static_cast<float>(levels);
    GroupQuantConfig c;
    c.bits = bits;
    c.rounding = Rounding::Nearest;
    c.grouping = Grouping::Flat;
    c.group_size = 512;
    const Quantized q = run(x, 1, c);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q.out[i], x[i]) << "bits " << bits << " element " << i;
    // Stochastic rounding is exact there too (zero fractional part).
    c.rounding = Rounding::Stochastic;
    const Quantized s = run(x, 1, c);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(s.out[i], x[i]) << "bits " << bits << " element " << i;
  }
}

// Over many noise draws, the mean of the dequantized values is x (within 5 standard errors of
// the variance bound) and each element's variance is at most step^2/4.
TEST(GroupQuantRounding, StochasticIsUnbiasedWithBoundedVariance) {
  constexpr int kDraws = 3000;
  for (int bits : {1, 2, 4}) {
    for (MetaType meta : {MetaType::F32, MetaType::BF16}) {
      GroupQuantConfig c;
      c.bits = bits;
      c.meta = meta;
      c.group_size = 64;
      c.grouping = Grouping::Flat;
      const auto x = random_values(128, 77 + bits, -1.3f, 2.1f);
      std::vector<double> sum(x.size(), 0.0), sum2(x.size(), 0.0);
      Quantized q;
      for (int d = 0; d < kDraws; ++d) {
        q = run(x, 1, c, QuantNoise{5, static_cast<uint64_t>(d)});
        for (size_t i = 0; i < x.size(); ++i) {
          sum[i] += q.out[i];
          sum2[i] += static_cast<double>(q.out[i]) * q.out[i];
        }
      }
      for (size_t i = 0; i < x.size(); ++i) {
        const GroupParams p = params_of(q, static_cast<int64_t>(i) / 64);  // metadata does not depend on the noise
        const double bound = static_cast<double>(p.step) * p.step / 4.0;
        if (meta == MetaType::F32) {  // the bound of the issue, with the true group range
          float mn = x[i / 64 * 64], mx = mn;
          for (size_t k = i / 64 * 64; k < i / 64 * 64 + 64; ++k) mn = std::min(mn, x[k]), mx = std::max(mx, x[k]);
          const double step = (mx - mn) / ((1 << bits) - 1);
          EXPECT_NEAR(bound, step * step / 4.0, 1e-5 * bound);
        }
        const double mean = sum[i] / kDraws, var = sum2[i] / kDraws - mean * mean;
        EXPECT_NEAR(mean, x[i], 5.0 * std::sqrt(bound / kDraws) + 1e-6)
            << "bits " << bits << " meta " << meta_name(meta) << " element " << i;
        EXPECT_LE(var, bound * 1.1 + 1e-9) << "bits " << bits << " element " << i;
      }
    }
  }
}

// The bulk (SIMD) kernel draws exactly the noise of the documented per-element helper and
// produces the codes quantize_value gives, for unaligned groups and tails too.
TEST(GroupQuantRounding, KernelMatchesScalarHelpers) {
  for (int bits : {1, 2, 3, 4, 8})
    for (int64_t G : {100, 256, 1000}) {
      GroupQuantConfig c;
      c.bits = bits;
      c.group_size = G;
      c.grouping = Grouping::PerSample;
      const auto x = random_values(3 * 700, 9, -4.0f, 1.0f);
      const QuantNoise noise{0x1234567890ull, quant_stream(17, 3)};
      const Quantized q = run(x, 3, c, noise);
      const uint32_t levels = (1u << bits) - 1u;
      for (int64_t gi = 0; gi < q.g.groups(); ++gi) {
        const int64_t start = q.g.group_start(gi), len = q.g.group_len(gi);
        float mn = x[static_cast<size_t>(start)], mx = mn;
        for (int64_t i = start; i < start + len; ++i)
          mn = std::min(mn, x[static_cast<size_t>(i)]), mx = std::max(mx, x[static_cast<size_t>(i)]);
        const GroupParams p = group_params(mn, mx, bits, c.meta);
        const uint8_t* src = q.codes.data() + q.g.group_code_offset(gi);
        for (int64_t i = 0; i < len; ++i) {
          const float r = rounding_uniform(noise.seed, noise.stream, static_cast<uint64_t>(start + i));
          ASSERT_EQ(packed_code_at(src, i, bits), quantize_value(x[static_cast<size_t>(start + i)], p, levels, r))
              << "bits " << bits << " G " << G << " element " << start + i;
        }
      }
    }
}

TEST(GroupQuantRounding, NoiseIsKeyedBySeedStreamAndElement) {
  GroupQuantConfig c;
  const auto x = random_values(4096, 4, -1.0f, 1.0f);
  const Quantized a = run(x, 1, c, {1, quant_stream(5, 0)}), b = run(x, 1, c, {1, quant_stream(5, 0)});
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_NE(a.codes, run(x, 1, c, {1, quant_stream(5, 1)}).codes);  // another tensor
  EXPECT_NE(a.codes, run(x, 1, c, {1, quant_stream(6, 0)}).codes);  // another step
  EXPECT_NE(a.codes, run(x, 1, c, {2, quant_stream(5, 0)}).codes);  // another seed
  // A pure function of the element index: quantizing a suffix of the buffer as its own flat
  // tensor with the same element numbering is not possible, but the helper is position-keyed:
  EXPECT_NE(rounding_uniform(1, 2, 127), rounding_uniform(1, 2, 128));
  EXPECT_EQ(rounding_uniform(1, 2, 1000), rounding_uniform(1, 2, 1000));
}

// Per-plane grouping: a plane of L >= G elements is cut into ceil(L / G) groups of equal length
// that never cross it; planes smaller than G are grouped whole, within each sample.
TEST(GroupQuantGeometry, PerPlaneGroupsNeverCrossAPlane) {
  struct Case {
    int64_t samples, channels, plane, G, group_len, groups_per_plane;
  };
  for (const Case& k : std::vector<Case>{{2, 3, 49, 64, 49, 1},     // 7 x 7: one group a plane
                                         {2, 3, 196, 64, 49, 4},    // 14 x 14: four of 49
                                         {1, 2, 784, 64, 61, 13},   // 28 x 28: thirteen of 61 (the last 52)
                                         {3, 2, 3136, 64, 64, 49},  // 56 x 56: exactly G
                                         {2, 6, 16, 64, 64, 0},     // 4 x 4: four planes to a group
                                         {2, 5, 1, 64, 64, 0}}) {   // (N, C, 1, 1): a sample's channels
    GroupQuantConfig c;
    c.group_size = k.G;
    c.grouping = Grouping::PerPlane;
    const int64_t numel = k.samples * k.channels * k.plane;
    SCOPED_TRACE(testing::Message() << "plane " << k.plane << " channels " << k.channels);
    const GroupGeometry g = group_geometry(numel, k.samples, c, k.plane);
    EXPECT_EQ(g.group_size, k.group_len);
    if (k.groups_per_plane > 0) {
      EXPECT_EQ(g.groups(), k.samples * k.channels * k.groups_per_plane);
    }
    int64_t covered = 0;
    for (int64_t gi = 0; gi < g.groups(); ++gi) {
      const int64_t start = g.group_start(gi), len = g.group_len(gi);
      ASSERT_EQ(start, covered) << "group " << gi;  // in order, no gap, no overlap
      covered += len;
      if (k.plane >= k.G) {
        EXPECT_EQ(start / k.plane, (start + len - 1) / k.plane) << "group " << gi << " crosses a plane";
      } else {
        EXPECT_EQ(start % k.plane, 0) << "group " << gi;
        EXPECT_EQ(len % k.plane, 0) << "group " << gi;
        EXPECT_EQ(start / (numel / k.samples), (start + len - 1) / (numel / k.samples)) << "group " << gi;
      }
    }
    EXPECT_EQ(covered, numel);
  }
  GroupQuantConfig c;  // no plane (a tensor of rank < 3): per sample
  c.grouping = Grouping::PerPlane;
  c.group_size = 64;
  const GroupGeometry g = group_geometry(4 * 100, 4, c, 0);
  EXPECT_EQ(g.spans, 4);
  EXPECT_EQ(g.group_size, 64);
}

// Why per-plane grouping exists: channels with different offsets (a convolution's output before
// its batchnorm) share no group, so each keeps a step fitted to its own spread; grouped per
// sample, a group of 64 spans two 7 x 7 planes and takes the range of both.
TEST(GroupQuantGeometry, PerPlaneKeepsChannelOffsetsApart) {
  const int64_t N = 2, C = 8, L = 49;
  std::vector<float> x = random_values(N * C * L, 5, -0.1f, 0.1f);
  for (int64_t i = 0; i < N * C * L; ++i) x[static_cast<size_t>(i)] += 10.0f * static_cast<float>((i / L) % C);
  auto worst_error = [&](Grouping grouping) {
    GroupQuantConfig c;
    c.bits = 2;
    c.group_size = 64;
    c.grouping = grouping;
    c.rounding = Rounding::Nearest;
    c.meta = MetaType::F32;  // bf16's step near 70 is 0.5: the test is about ranges, not precision
    Quantized q;
    q.g = group_geometry(N * C * L, N, c, L);
    q.codes.assign(static_cast<size_t>(q.g.code_bytes()), 0);
    q.meta.assign(static_cast<size_t>(q.g.meta_bytes()), 0);
    quantize_groups(x.data(), q.g, c.rounding, QuantNoise{}, q.codes.data(), q.meta.data());
    q.out.assign(x.size(), NAN);
    dequantize_groups(q.codes.data(), q.meta.data(), q.g, q.out.data());
    float worst = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(q.out[i] - x[i]));
    return worst;
  };
  EXPECT_LE(worst_error(Grouping::PerPlane), 0.2f / 3.0f / 2.0f * 1.05f + 1e-3f);  // half a step of a 0.2 range
  EXPECT_GE(worst_error(Grouping::PerSample), 1.0f);                               // a step of 10 / 3
}

TEST(GroupQuantOptions, BadConfigIsAClearError) {
  GroupQuantConfig c;
  c.bits = 5;
  try {
    c.check("layer1.conv");
    FAIL() << "bits 5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer1.conv"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("5"), std::string::npos);
  }
  c.bits = 2;
  c.group_size = 0;
  EXPECT_THROW(c.check("x"), Error);
  EXPECT_THROW(group_geometry(10, 1, c), Error);
}

}  // namespace
}  // namespace packrat
