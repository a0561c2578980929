// The fp8 conversions of quant/fp8/fp8_math.h (the bodies both devices run): exact bit patterns at
// the edges (zero's sign, ties to even, the carry into the exponent, subnormals, the largest value,
// saturation, NaN, e5m2's infinities), every code's decode and re-encode, and millions of f32 values
// against a slow reference that picks the nearest code by its decoded value in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "quant/fp8/fp8_math.h"

namespace packrat {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Fp8Math, E4m3EdgeCasesHaveTheirBitPatterns) {
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);  // zero keeps its sign
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);   // 0.0111.000
  EXPECT_EQ(f32_to_e4m3(-1.5f), 0xBC);
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // tie between 1 (even) and 1.125: 1
  EXPECT_EQ(f32_to_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);  // tie between 1.125 (odd) and 1.25: 1.25
  EXPECT_EQ(f32_to_e4m3(1.9375f), 0x40);  // tie between 1.875 and 2: the carry into the exponent
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);   // the largest: S.1111.110
  EXPECT_EQ(f32_to_e4m3(-448.0f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(416.0f), 0x7D);
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7E);  // beyond the largest: saturated, never the NaN pattern
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // the tie that would round past the largest
  EXPECT_EQ(f32_to_e4m3(480.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1.0e6f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7E);  // no infinity in E4M3FN: the largest
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7F);  // S.1111.111
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0xFF);
  // Subnormals: units of 2^-9.
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);    // the smallest
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half of it: tie to even 0
  EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.0f, -10)), 0x80);  // ... keeping the sign
  EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);  // tie between 1 and 2 units: 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(2.5f, -9)), 0x02);  // tie between 2 and 3 units: 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.0f, -9)), 0x07);  // the largest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.5f, -9)), 0x08);  // tie between it and the smallest normal: normal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -6)), 0x08);  // the smallest normal
  EXPECT_EQ(f32_to_e4m3(from_bits(1)), 0x00);          // an f32 subnormal
  EXPECT_EQ(f32_to_e4m3(-from_bits(0x007FFFFF)), 0x80);

  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x07), std::ldexp(7.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)) && e4m3_to_f32(0x80) == 0.0f);
  EXPECT_FALSE(std::signbit(e4m3_to_f32(0x00)));
  EXPECT_FALSE(std::isinf(e4m3_to_f32(0x78)));  // S.1111.000 is 256, not an infinity
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);
}

TEST(Fp8Math, E5m2EdgeCasesHaveTheirBitPatterns) {
  EXPECT_EQ(f32_to_e5m2(0.0f), 0x00);
  EXPECT_EQ(f32_to_e5m2(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e5m2(1.0f), 0x3C);    // 0.01111.00
  EXPECT_EQ(f32_to_e5m2(1.125f), 0x3C);  // tie between 1 (even) and 1.25
  EXPECT_EQ(f32_to_e5m2(1.375f), 0x3E);  // tie between 1.25 (odd) and 1.5
  EXPECT_EQ(f32_to_e5m2(1.875f), 0x40);  // tie between 1.75 and 2: the carry into the exponent
  EXPECT_EQ(f32_to_e5m2(57344.0f), 0x7B);  // the largest: S.11110.11
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7B);  // the tie that would round to infinity: saturated
  EXPECT_EQ(f32_to_e5m2(1.0e9f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(-1.0e9f), 0xFB);
  EXPECT_EQ(f32_to_e5m2(kInf), 0x7C);  // infinities stay infinite: S.11111.00
  EXPECT_EQ(f32_to_e5m2(-kInf), 0xFC);
  EXPECT_EQ(f32_to_e5m2(kNaN), 0x7F);
  EXPECT_EQ(f32_to_e5m2(-kNaN), 0xFF);
  // Subnormals: units of 2^-16.
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -17)), 0x00);  // tie to even 0
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.5f, -16)), 0x02);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(3.0f, -16)), 0x03);  // the largest subnormal
  EXPECT_EQ(f32_to_e5m2(std::ldexp(3.5f, -16)), 0x04);  // tie: the smallest normal 2^-14
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -14)), 0x04);

  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x7C), kInf);
  EXPECT_EQ(e5m2_to_f32(0xFC), -kInf);
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(e5m2_to_f32(c))) << int(c);
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_to_f32(0x3C), 1.0f);
  EXPECT_TRUE(std::signbit(e5m2_to_f32(0x80)) && e5m2_to_f32(0x80) == 0.0f);
  EXPECT_EQ(fp8_max(Fp8Format::E4M3), e4m3_to_f32(0x7E));
  EXPECT_EQ(fp8_max(Fp8Format::E5M2), e5m2_to_f32(0x7B));
}

// The value of a code by the format's definition, in double (independent of fp8_math.h).
double reference_value(uint8_t c, int m_bits, int bias) {
  const int e_bits = 7 - m_bits;
  const int e = (c >> m_bits) & ((1 << e_bits) - 1), m = c & ((1 << m_bits) - 1);
  const double mag = e == 0 ? std::ldexp(m, 1 - bias - m_bits) : std::ldexp(1.0 + std::ldexp(m, -m_bits), e - bias);
  return (c & 0x80) ? -mag : mag;
}

// The nearest of the finite codes 0..max_code by value, ties to the even code, saturating; the sign
// copied. x finite.
uint8_t reference_encode(float x, int m_bits, int bias, uint8_t max_code) {
  static const std::vector<double> e4m3 = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7E; ++c) v.push_back(reference_value(static_cast<uint8_t>(c), 3, 7));
    return v;
  }();
  static const std::vector<double> e5m2 = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7B; ++c) v.push_back(reference_value(static_cast<uint8_t>(c), 2, 15));
    return v;
  }();
  const std::vector<double>& values = m_bits == 3 ? e4m3 : e5m2;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= values[max_code]) return static_cast<uint8_t>(max_code | (std::signbit(x) ? 0x80 : 0));  // saturated
  int best = 0;
  double best_d = a;
  for (int c = 1; c <= max_code; ++c) {
    const double d = std::fabs(values[static_cast<size_t>(c)] - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8Math, EveryCodeDecodesToItsValueAndEncodesBack) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((c & 0x7F) != 0x7F) {
      EXPECT_EQ(static_cast<double>(e4m3_to_f32(code)), reference_value(code, 3, 7)) << c;
      EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(code)), code) << c;
    }
    if ((c & 0x7C) != 0x7C) {
      EXPECT_EQ(static_cast<double>(e5m2_to_f32(code)), reference_value(code, 2, 15)) << c;
      EXPECT_EQ(f32_to_e5m2(e5m2_to_f32(code)), code) << c;
    }
  }
}

TEST(Fp8Math, ConversionIsTheNearestCodeTiesToEven) {
  // Every midpoint between neighbouring codes and its two f32 neighbours, then random magnitudes
  // over the whole f32 range and over each format's own.
  std::vector<float> xs;
  for (int c = 0; c < 0x7E; ++c) {
    const double mid4 = (reference_value(c, 3, 7) + reference_value(c + 1, 3, 7)) / 2;
    for (float v : {static_cast<float>(mid4)}) xs.insert(xs.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, kInf)});
    if (c < 0x7B) {
      const float v = static_cast<float>((reference_value(c, 2, 15) + reference_value(c + 1, 2, 15)) / 2);
      xs.insert(xs.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, kInf)});
    }
  }
  PhiloxStream r(7, 1);
  for (int i = 0; i < 50000; ++i) {
    xs.push_back(from_bits(r.next_u32() & 0x7F7FFFFFu));                           // any finite f32
    xs.push_back(std::ldexp(r.uniform(), static_cast<int>(r.below(40)) - 24));  // about the formats' ranges
  }
  int64_t checked = 0;
  for (float x : xs)
    for (float v : {x, -x}) {
      ASSERT_EQ(f32_to_e4m3(v), reference_encode(v, 3, 7, 0x7E)) << v;
      ASSERT_EQ(f32_to_e5m2(v), reference_encode(v, 2, 15, 0x7B)) << v;
      ++checked;
    }
  EXPECT_GT(checked, 200000);
}

TEST(Fp8Math, ScalesComeFromTheFiniteAmax) {
  EXPECT_EQ(fp8_amax_term(-3.5f), 3.5f);
  EXPECT_EQ(fp8_amax_term(kNaN), 0.0f);
  EXPECT_EQ(fp8_amax_term(-kInf), 0.0f);
  EXPECT_EQ(fp8_scale_of(0.0f, Fp8Format::E4M3), 1.0f);            // nothing to scale: 1
  EXPECT_EQ(fp8_scale_of(from_bits(1), Fp8Format::E4M3), 1.0f);     // amax / fmax underflows: 1
  EXPECT_EQ(fp8_scale_of(896.0f, Fp8Format::E4M3), 2.0f);
  EXPECT_EQ(fp8_scale_of(57344.0f * 4, Fp8Format::E5M2), 4.0f);
  const float x[] = {1.0f, -7.0f, kNaN, kInf, 3.0f, -kInf};
  EXPECT_EQ(fp8_amax_strided(x, 0, 6, 1), 7.0f);
  EXPECT_EQ(fp8_amax_strided(x, 0, 6, 2), 3.0f);  // elements 0, 2, 4
  EXPECT_EQ(fp8_group_lanes(1), 1);
  EXPECT_EQ(fp8_group_lanes(16), 4);
  EXPECT_EQ(fp8_group_lanes(128), 32);
  EXPECT_EQ(fp8_group_lanes(4096), 32);
}

}  // namespace
}  // namespace packrat
