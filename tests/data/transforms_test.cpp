#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "core/error.h"
#include "data/transforms.h"

using namespace packrat;
using namespace packrat::data;

namespace {

// (C, H, W) image with value 1000 c + 10 y + x, so every pixel says where it came from.
std::vector<float> coded(const ImageShape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y)
      for (int64_t x = 0; x < s.w; ++x) v[(c * s.h + y) * s.w + x] = static_cast<float>(1000 * c + 10 * y + x);
  return v;
}

}  // namespace

TEST(DataTransforms, RandomCropWithPaddingShiftsPixelsAndPadsWithZeros) {
  const ImageShape s{2, 6, 5};
  const std::vector<float> in = coded(s);
  RandomCrop crop(6, 5, 2);
  ASSERT_EQ(crop.output_shape(s), s);
  std::set<std::pair<int64_t, int64_t>> seen;
  std::vector<float> out(static_cast<size_t>(s.numel()));
  for (int64_t i = 0; i < 400; ++i) {
    uint32_t w[4];
    Pipeline::words(7, 0, i, 0, w);
    int64_t dy, dx;
    crop.offsets(s, w, dy, dx);
    ASSERT_GE(dy, 0);
    ASSERT_LE(dy, 4);
    ASSERT_GE(dx, 0);
    ASSERT_LE(dx, 4);
    seen.insert({dy, dx});
    crop.apply(in.data(), s, out.data(), w);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < 6; ++y)
        for (int64_t x = 0; x < 5; ++x) {
          const int64_t sy = y + dy - 2, sx = x + dx - 2;
          const float want = (sy < 0 || sy >= 6 || sx < 0 || sx >= 5) ? 0.0f : in[(c * 6 + sy) * 5 + sx];
          ASSERT_EQ(out[(c * 6 + y) * 5 + x], want) << "dy " << dy << " dx " << dx;
        }
  }
  EXPECT_EQ(seen.size(), 25u);  // every offset of the 5 x 5 range occurs
}

TEST(DataTransforms, RandomCropToASmallerWindowWithoutPadding) {
  const ImageShape s{1, 8, 8};
  const std::vector<float> in = coded(s);
  RandomCrop crop(3, 4, 0);
  EXPECT_EQ(crop.output_shape(s), (ImageShape{1, 3, 4}));
  std::vector<float> out(12);
  uint32_t w[4];
  Pipeline::words(1, 2, 3, 0, w);
  int64_t dy, dx;
  crop.offsets(s, w, dy, dx);
  crop.apply(in.data(), s, out.data(), w);
  EXPECT_EQ(out[0], 10 * dy + dx);
  EXPECT_EQ(out[11], 10 * (dy + 2) + dx + 3);
  EXPECT_THROW(RandomCrop(10, 10, 0).output_shape(s), Error);
}

TEST(DataTransforms, HorizontalFlipMirrorsAboutHalfTheSamples) {
  const ImageShape s{3, 2, 4};
  const std::vector<float> in = coded(s);
  RandomHorizontalFlip flip(0.5);
  std::vector<float> out(in.size());
  int flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    uint32_t w[4];
    Pipeline::words(3, 1, i, 0, w);
    flip.apply(in.data(), s, out.data(), w);
    if (flip.flips(w)) {
      ++flipped;
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < 2; ++y)
          for (int64_t x = 0; x < 4; ++x) ASSERT_EQ(out[(c * 2 + y) * 4 + x], 1000 * c + 10 * y + (3 - x));
    } else {
      ASSERT_EQ(out, in);
    }
  }
  EXPECT_NEAR(flipped, 500, 80);  // 5 standard deviations
  uint32_t w[4] = {0, 0, 0, 0};
  RandomHorizontalFlip(0.0).apply(in.data(), s, out.data(), w);
  EXPECT_EQ(out, in);
}

TEST(DataTransforms, NormalizePerChannel) {
  const ImageShape s{2, 1, 2};
  const std::vector<float> in = {0.5f, 1.0f, 0.0f, 0.25f};
  std::vector<float> out(4);
  Normalize({0.5f, 0.25f}, {0.5f, 0.25f}).apply(in.data(), s, out.data(), nullptr);
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 1.0f);
  EXPECT_FLOAT_EQ(out[2], -1.0f);
  EXPECT_FLOAT_EQ(out[3], 0.0f);
  EXPECT_THROW(Normalize({0.5f, 0.5f}, {1.f, 1.f}).output_shape({3, 2, 2}), Error);
  EXPECT_THROW(Normalize({0.5f}, {0.f}), Error);
}

TEST(DataTransforms, BilinearResizeMatchesPyTorchHalfPixelCentres) {
  // torch.nn.functional.interpolate(torch.tensor([[[[0., 1.], [2., 3.]]]]), size=(4, 4), mode="bilinear")
  const std::vector<float> in = {0, 1, 2, 3};
  std::vector<float> up(16);
  resize_bilinear(in.data(), {1, 2, 2}, up.data(), 4, 4);
  const std::vector<float> want = {0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3};
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(up[i], want[i]) << i;
  // Halving averages 2 x 2 blocks.
  const std::vector<float> big = coded({1, 4, 4});
  std::vector<float> small(4);
  Resize(2, 2).apply(big.data(), {1, 4, 4}, small.data(), nullptr);
  EXPECT_FLOAT_EQ(small[0], 5.5f);
  EXPECT_FLOAT_EQ(small[3], 27.5f);
}

TEST(DataTransforms, PipelineIsAPureFunctionOfSeedEpochAndIndex) {
  Pipeline p = parse_pipeline({"random_crop(8, 2)", "hflip", "normalize(0.5 / 0.25)"});
  const ImageShape s{1, 8, 8};
  EXPECT_EQ(p.output_shape(s), s);
  std::vector<uint8_t> img(64);
  std::iota(img.begin(), img.end(), uint8_t{0});
  std::vector<float> scratch, a(64), b(64), c(64), d(64);
  p.run(img.data(), s, a.data(), 42, 3, 17, scratch);
  p.run(img.data(), s, b.data(), 42, 3, 17, scratch);
  EXPECT_EQ(a, b);
  int differ_epoch = 0, differ_index = 0;
  for (int64_t e = 0; e < 20; ++e) {
    p.run(img.data(), s, c.data(), 42, e, 17, scratch);
    differ_epoch += c != a;
    p.run(img.data(), s, d.data(), 42, 3, 100 + e, scratch);
    differ_index += d != a;
  }
  EXPECT_GE(differ_epoch, 15);
  EXPECT_GE(differ_index, 15);
  // Without transforms: x / 255.
  Pipeline none;
  none.run(img.data(), s, c.data(), 0, 0, 0, scratch);
  EXPECT_FLOAT_EQ(c[51], 51.0f / 255.0f);
}

TEST(DataTransforms, ParsePipelineAcceptsTheDocumentedFormsAndRejectsOthers) {
  Pipeline p = parse_pipeline({"random_crop(32, 4)", "hflip(0.25)", "resize(40, 36)", "normalize(cifar10)"});
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.output_shape({3, 32, 32}), (ImageShape{3, 40, 36}));
  EXPECT_EQ(p.describe(),
            "to_float -> random_crop(32, 32, padding=4) -> hflip(0.25) -> resize(40, 36) -> "
            "normalize(mean=[0.4914, 0.4822, 0.4465], std=[0.247, 0.2435, 0.2616])");
  EXPECT_EQ(parse_pipeline({"resize(8)"}).output_shape({1, 3, 3}), (ImageShape{1, 8, 8}));
  EXPECT_THROW(parse_pipeline({"rotate(10)"}), Error);
  EXPECT_THROW(parse_pipeline({"random_crop(32)"}), Error);
  EXPECT_THROW(parse_pipeline({"random_crop(32, x)"}), Error);
  EXPECT_THROW(parse_pipeline({"normalize(svhn)"}), Error);
  EXPECT_THROW(parse_pipeline({"hflip(2)"}), Error);
  try {
    parse_pipeline({"resize(3.5)"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "transform 'resize(3.5)': 3.5 is not a whole number");
  }
}

// Sizes beyond kMaxImageSide used to overflow int64 (resize(1e30) became a negative size) or
// allocate terabytes (resize(1e10)); they are refused naming the transform.
TEST(DataTransforms, SizesThatWouldOverflowAreRefused) {
  for (const char* item : {"resize(1e10)", "resize(1e30)", "resize(8, 65537)", "random_crop(28, 1e19)",
                           "random_crop(100000, 2)"}) {
    try {
      parse_pipeline({item});
      FAIL() << item << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("transform '") + item + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("larger than 65536"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Resize(1 << 17, 4), Error);
  EXPECT_THROW(RandomCrop(4, 4, int64_t{1} << 40), Error);
  EXPECT_EQ(parse_pipeline({"resize(65536, 2)"}).output_shape({1, 3, 3}), (ImageShape{1, 65536, 2}));
}
