// The fp8 codec (quant/fp8/fp8_codec.h) on the CPU: each element's round-trip error within the
// format's half ulp at its scaled magnitude (relative 2^-4 for e4m3, 2^-3 for e5m2; half a
// subnormal step near zero), for both scales and group sizes with tails; the scales themselves
// (amax / fmax of the finite elements, 1 for an all-zero group); the largest element at the
// format's largest code; NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "core/error.h"
#include "core/tensor.h"
#include "quant/fp8/fp8_codec.h"

namespace packrat {
namespace {

// Values over several orders of magnitude, a few zeros, one group all zeros (elements [0, 40)).
Tensor wide_tensor(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty({n});
  PhiloxStream r(seed, 2);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float mag = std::ldexp(r.uniform(), static_cast<int>(r.below(24)) - 12);
    p[i] = (r.uniform() < 0.5f ? -1.0f : 1.0f) * mag;
    if (i % 97 == 5 || i < 40) p[i] = i % 2 ? -0.0f : 0.0f;
  }
  return t;
}

struct Encoded {
  Tensor codes, scales, back;
};
Encoded round_trip(const Tensor& x, const Fp8Config& c) {
  const Fp8Geometry g = fp8_geometry(x.numel(), c);
  Encoded e{Tensor::empty({g.numel}, DType::u8), Tensor::empty({g.groups()}), Tensor::empty(x.shape())};
  fp8_encode(x, c, e.codes, e.scales);
  fp8_decode(e.codes, e.scales, c, e.back);
  return e;
}

int mantissa_bits(Fp8Format f) { return f == Fp8Format::E4M3 ? 3 : 2; }
int bias(Fp8Format f) { return f == Fp8Format::E4M3 ? 7 : 15; }

std::vector<Fp8Config> configs() {
  std::vector<Fp8Config> out;
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    out.push_back({f, Fp8Scale::PerTensor, 128});
    for (int64_t g : {1, 7, 40, 128, 1000}) out.push_back({f, Fp8Scale::PerGroup, g});
  }
  return out;
}

std::string name(const Fp8Config& c) {
  return std::string(fp8_format_name(c.format)) + " " + std::string(fp8_scale_name(c.scale)) +
         (c.scale == Fp8Scale::PerGroup ? " G=" + std::to_string(c.group_size) : "");
}

TEST(Fp8Codec, RoundTripErrorIsWithinHalfAnUlpOfTheScaledValue) {
  const Tensor x = wide_tensor(5003, 1);
  const float* p = x.data<float>();
  for (const Fp8Config& c : configs()) {
    SCOPED_TRACE(name(c));
    const Encoded e = round_trip(x, c);
    const Fp8Geometry g = fp8_geometry(x.numel(), c);
    const float* back = e.back.data<float>();
    const float* scales = e.scales.data<float>();
    const double rel = std::ldexp(1.0, -(mantissa_bits(c.format) + 1));  // half an ulp, relative
    double worst = 0, sum_sq = 0, sum_x_sq = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double s = scales[i / g.group_size];
      const double floor_err = s * std::ldexp(1.0, -bias(c.format) - mantissa_bits(c.format));  // half a subnormal step
      const double err = std::fabs(static_cast<double>(back[i]) - p[i]);
      const double bound = (rel * std::fabs(p[i]) + floor_err) * (1 + 1e-5);
      ASSERT_LE(err, bound) << "element " << i << ": " << p[i] << " came back as " << back[i];
      if (p[i] == 0.0f) {
        ASSERT_EQ(std::signbit(back[i]), std::signbit(p[i])) << i;  // zeros exact, with their sign
      }
      worst = std::max(worst, err / std::max(1e-30, static_cast<double>(std::fabs(p[i]))));
      sum_sq += err * err;
      sum_x_sq += static_cast<double>(p[i]) * p[i];
    }
    // Not lossless either: the codec really rounds.
    EXPECT_GT(sum_sq, 0.0);
    if (c.scale == Fp8Scale::PerGroup && c.group_size <= 40) {
      EXPECT_LT(std::sqrt(sum_sq / sum_x_sq), c.format == Fp8Format::E4M3 ? 0.04 : 0.08);
    }
  }
}

TEST(Fp8Codec, ScalesAreTheFiniteAmaxOverTheLargestValue) {
  const Tensor x = wide_tensor(1000, 2);
  for (const Fp8Config& c : configs()) {
    SCOPED_TRACE(name(c));
    const Encoded e = round_trip(x, c);
    const Fp8Geometry g = fp8_geometry(x.numel(), c);
    ASSERT_EQ(e.scales.numel(), c.scale == Fp8Scale::PerTensor ? 1 : (1000 + c.group_size - 1) / c.group_size);
    const float* p = x.data<float>();
    for (int64_t k = 0; k < g.groups(); ++k) {
      float amax = 0;
      int64_t at = -1;
      for (int64_t i = k * g.group_size; i < std::min<int64_t>(1000, (k + 1) * g.group_size); ++i)
        if (std::fabs(p[i]) > amax) amax = std::fabs(p[i]), at = i;
      const float want = amax == 0 ? 1.0f : amax / fp8_max(c.format);
      ASSERT_EQ(e.scales.data<float>()[k], want) << "group " << k;
      if (at >= 0) {  // the group's largest magnitude takes the largest code
        const uint8_t top = c.format == Fp8Format::E4M3 ? 0x7E : 0x7B;
        EXPECT_EQ(e.codes.data<uint8_t>()[at] & 0x7F, top) << "group " << k;
      }
    }
  }
}

TEST(Fp8Codec, NanAndInfinitiesDoNotSetTheScale) {
  Tensor x = Tensor::empty({8});
  const float inf = std::numeric_limits<float>::infinity();
  const float v[] = {1.0f, -2.0f, std::numeric_limits<float>::quiet_NaN(), inf, 0.5f, -inf, 4.0f, 0.25f};
  std::copy(v, v + 8, x.data<float>());
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Encoded e = round_trip(x, {f, Fp8Scale::PerTensor, 128});
    EXPECT_EQ(e.scales.data<float>()[0], 4.0f / fp8_max(f));
    const float* b = e.back.data<float>();
    EXPECT_TRUE(std::isnan(b[2]));
    EXPECT_EQ(b[6], 4.0f);
    if (f == Fp8Format::E5M2) {
      EXPECT_EQ(b[3], inf);
      EXPECT_EQ(b[5], -inf);
    } else {  // no infinity: the largest value, scaled
      EXPECT_EQ(b[3], 448.0f * e.scales.data<float>()[0]);
      EXPECT_EQ(b[5], -448.0f * e.scales.data<float>()[0]);
    }
  }
}

TEST(Fp8Codec, PerTensorIsOneGroupAndLargeTensorsSplitAcrossThreads) {
  // Large enough for the parallel amax and encode (kMinParallelWork): the same bytes as one
  // group of the whole tensor encoded by the per-group path.
  const Tensor x = wide_tensor(200003, 3);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Encoded t = round_trip(x, {f, Fp8Scale::PerTensor, 1});
    const Encoded g = round_trip(x, {f, Fp8Scale::PerGroup, 200003});
    EXPECT_EQ(std::vector<uint8_t>(t.codes.data<uint8_t>(), t.codes.data<uint8_t>() + t.codes.numel()),
              std::vector<uint8_t>(g.codes.data<uint8_t>(), g.codes.data<uint8_t>() + g.codes.numel()));
    EXPECT_EQ(t.scales.to_vector(), g.scales.to_vector());
    EXPECT_EQ(t.back.to_vector(), g.back.to_vector());
  }
}

TEST(Fp8Codec, BuffersOfTheWrongSizeAreRefused) {
  const Tensor x = wide_tensor(100, 4);
  const Fp8Config c{Fp8Format::E4M3, Fp8Scale::PerGroup, 32};
  Tensor codes = Tensor::empty({100}, DType::u8), scales = Tensor::empty({3});
  EXPECT_THROW(fp8_encode(x, c, codes, scales), Error);  // 4 groups of 32
  EXPECT_THROW(fp8_geometry(10, {Fp8Format::E4M3, Fp8Scale::PerGroup, 0}), Error);
}

}  // namespace
}  // namespace packrat
