// JPEG files decode through libjpeg-turbo (data/jpeg_decode.h): real pixels in RGB and grey,
// corrupt and oversized files named.
#include "data/jpeg_decode.h"

#include <gtest/gtest.h>

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cstdlib>
#include <fstream>

#include "data/image_folder.h"
#include "tests/support/errors.h"

namespace fs = std::filesystem;
using namespace packrat;

namespace {

// A w x h RGB gradient (red along x, green along y, blue 60) as a quality-100 JPEG file.
fs::path write_gradient_jpeg(const std::string& name, int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));  // (h, w, 3)
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[static_cast<size_t>((y * w + x) * 3)];
      p[0] = static_cast<uint8_t>(x * 255 / (w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / (h - 1));
      p[2] = 60;
    }
  jpeg_compress_struct info;
  jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &out, &size);
  info.image_width = static_cast<JDIMENSION>(w);
  info.image_height = static_cast<JDIMENSION>(h);
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 100, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = &rgb[static_cast<size_t>(info.next_scanline) * w * 3];
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  const fs::path f = fs::temp_directory_path() / ("packrat_" + name + "_" + std::to_string(::getpid()) + ".jpg");
  std::ofstream(f, std::ios::binary).write(reinterpret_cast<const char*>(out), static_cast<std::streamsize>(size));
  std::free(out);
  return f;
}

}  // namespace

TEST(JpegDecode, RgbAndGreyPixelsAreTheImages) {
  const fs::path f = write_gradient_jpeg("gradient", 32, 16);
  data::ImageShape shape;
  const std::vector<uint8_t> chw = data::decode_image(f, 3, 0, 0, shape);  // (3, 16, 32)
  ASSERT_EQ(shape.c, 3);
  ASSERT_EQ(shape.h, 16);
  ASSERT_EQ(shape.w, 32);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 32; ++x) {
      EXPECT_NEAR(chw[static_cast<size_t>(y * 32 + x)], x * 255 / 31, 8) << x << "," << y;             // red
      EXPECT_NEAR(chw[static_cast<size_t>((16 + y) * 32 + x)], y * 255 / 15, 8) << x << "," << y;      // green
      EXPECT_NEAR(chw[static_cast<size_t>((32 + y) * 32 + x)], 60, 8) << x << "," << y;                // blue
    }
  const std::vector<uint8_t> grey = data::decode_image(f, 1, 8, 8, shape);  // resized: (1, 8, 8)
  EXPECT_EQ(shape.c, 1);
  EXPECT_EQ(shape.h, 8);
  EXPECT_EQ(grey.size(), 64u);
}

TEST(JpegDecode, TruncatedAndOversizedFilesAreNamed) {
  const fs::path f = write_gradient_jpeg("cut", 32, 16);
  std::ifstream in(f, std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  int w = 0, h = 0;
  // The header alone: libjpeg-turbo fills the missing rows, or says why it cannot.
  const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + 20);
  std::string m = packrat::testing::message_of([&] { data::decode_jpeg(f, head, 3, 1 << 20, w, h); });
  EXPECT_NE(m.find("image_folder: " + f.string() + " cannot be decoded: "), std::string::npos) << m;
  // More pixels than allowed: refused from the header, nothing decoded.
  m = packrat::testing::message_of([&] { data::decode_jpeg(f, bytes, 3, 100, w, h); });
  EXPECT_NE(m.find("image_folder: " + f.string() + " is corrupt or too large: its header promises 512 pixels (at most 100)"),
            std::string::npos)
      << m;
  EXPECT_FALSE(data::is_jpeg({0x89, 'P', 'N', 'G'}));
  EXPECT_TRUE(data::is_jpeg(bytes));
}
