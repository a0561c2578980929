// The 16-bit floats (core/half.h): round-to-nearest-even conversions against bit patterns worked out by hand
// (and as PyTorch's c10::BFloat16 / c10::Half give them), and every backend's convert / fill / reorder on
// bf16 and f16 tensors.
#include "core/half.h"

#include <cmath>
#include <limits>

#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

float f(uint32_t bits) { return f32_from_bits(bits); }

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(f(0x3F808000)),
            0x3F80);  // a tie below an even mantissa: down
  EXPECT_EQ(f32_to_bf16(f(0x3F818000)),
            0x3F82);                              // a tie below an odd mantissa: up to even
  EXPECT_EQ(f32_to_bf16(f(0x3F808001)), 0x3F81);  // just above the tie: up
  EXPECT_EQ(f32_to_bf16(f(0x7F7FFFFF)),
            0x7F80);  // the largest f32 rounds to infinity
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);  // exact widening
}

TEST(Half, F16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);   // the largest f16
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);  // below the tie with 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);   // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048),
            0x3C00);  // a tie below an even mantissa: down
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048),
            0x3C02);                                     // a tie below an odd mantissa: up
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)),
            0x0001);  // the smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)),
            0x0000);                                     // half of it: a tie, to even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);  // above the tie: up
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)),
            0x0002);  // 1.5 units: a tie, to even (2)
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)),
            0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  // Widening is exact, subnormals included; every f16 round-trips.
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF)) continue;  // NaNs
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Half, EveryBackendConvertsFillsAndReordersSixteenBitTensors) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor host = testing::host_random({2, 16, 3, 5}, 7);
    const std::vector<float> values = host.to_vector();
    for (DType d : {DType::bf16, DType::f16}) {
      Tensor h = Tensor::empty(host.shape(), d);
      b->convert(host.to(b->device()), h);
      EXPECT_EQ(h.nbytes(), h.numel() * 2);
      const std::vector<float> back = testing::host_values(h);  // widened on the host: exact
      for (size_t k = 0; k < values.size(); ++k) {
        const float want = d == DType::bf16 ? bf16_to_f32(f32_to_bf16(values[k])) : f16_to_f32(f32_to_f16(values[k]));
        ASSERT_EQ(back[k], want) << dtype_name(d) << " element " << k;
      }
      const Tensor blocked = b->to_layout(h, b->device().is_cpu() ? Layout::nChw16c : Layout::NHWC);
      EXPECT_EQ(testing::host_values(blocked), back) << dtype_name(d);
      b->fill(h, 0.1);
      EXPECT_EQ(testing::host_values(h)[3],
                d == DType::bf16 ? bf16_to_f32(f32_to_bf16(0.1f)) : f16_to_f32(f32_to_f16(0.1f)));
    }
  }
}

}  // namespace
}  // namespace packrat
