#include <gtest/gtest.h>

#include "core/error.h"
#include "data/idx.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

// 5 images of 4 x 3 with pixel (n, y, x) = 16 n + 4 y + x, labels 0, 3, 9, 1, 7.
std::vector<uint8_t> images5() {
  std::vector<uint8_t> px;
  for (int n = 0; n < 5; ++n)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 3; ++x) px.push_back(static_cast<uint8_t>(16 * n + 4 * y + x));
  return idx_bytes({5, 4, 3}, px);
}
std::vector<uint8_t> labels5() { return idx_bytes({5}, {0, 3, 9, 1, 7}); }

}  // namespace

TEST(DataIdx, ReadsAGzippedImageAndLabelPair) {
  TempDir t;
  write_gz(idx_images_file(t.path(), Split::Train), images5());
  write_gz(idx_labels_file(t.path(), Split::Train), labels5());
  auto ds = load_idx_dataset(idx_images_file(t.path(), Split::Train), idx_labels_file(t.path(), Split::Train),
                             fashion_mnist_class_names(), "fashion_mnist train");
  ASSERT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->image_shape(), (ImageShape{1, 4, 3}));
  EXPECT_EQ(ds->labels(), (std::vector<int64_t>{0, 3, 9, 1, 7}));
  EXPECT_EQ(ds->class_names()[9], "Ankle boot");
  std::vector<uint8_t> img(12);  // (1, 4, 3)
  EXPECT_EQ(ds->get(3, img.data()), 1);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 3; ++x) EXPECT_EQ(img[y * 3 + x], 48 + 4 * y + x);
}

TEST(DataIdx, ReadsUncompressedFilesToo) {
  TempDir t;
  write_bytes(t / "im", images5());
  IdxArray a = read_idx(t / "im", 3, "mnist");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 4, 3}));
  EXPECT_EQ(a.data.size(), 60u);
  EXPECT_EQ(a.data[59], 16 * 4 + 4 * 3 + 2);
}

TEST(DataIdx, HeaderErrorsNameTheFile) {
  TempDir t;
  const fs::path p = t / "x.gz";
  std::vector<uint8_t> bad = images5();
  bad[0] = 0x1f;
  write_gz(p, bad);
  EXPECT_NE(message_of([&] { read_idx(p, 3, "mnist"); }).find(p.string() + " is not an IDX file"), std::string::npos);
  bad = images5();
  bad[2] = 0x0D;  // f32
  write_gz(p, bad);
  EXPECT_NE(message_of([&] { read_idx(p, 3, "mnist"); }).find("holds IDX type 0x0d"), std::string::npos);
  write_gz(p, labels5());
  EXPECT_NE(message_of([&] { read_idx(p, 3, "mnist"); }).find(p.string() + " has 1 dimensions, expected 3"), std::string::npos);
  write_gz(p, {0, 0, 8, 3, 0, 0});
  EXPECT_NE(message_of([&] { read_idx(p, 3, "mnist"); }).find("truncated: 6 bytes, shorter than its 16-byte header"),
            std::string::npos);
}

TEST(DataIdx, TruncatedAndOverlongDataAreErrors) {
  TempDir t;
  const fs::path p = t / "x.gz";
  std::vector<uint8_t> b = images5();
  b.resize(b.size() - 7);
  write_gz(p, b);
  const std::string m = message_of([&] { read_idx(p, 3, "fashion_mnist"); });
  EXPECT_NE(m.find("fashion_mnist: " + p.string() + " is truncated: its header promises 60 data bytes, the file holds 53 (7 missing)"),
            std::string::npos) << m;
  b = images5();
  b.push_back(1);
  write_gz(p, b);
  EXPECT_NE(message_of([&] { read_idx(p, 3, "mnist"); }).find("1 bytes after the 60 data bytes"), std::string::npos);
}

TEST(DataIdx, CorruptAndTruncatedGzipAreErrors) {
  TempDir t;
  const fs::path p = t / "x.gz";
  std::vector<uint8_t> big;
  for (int i = 0; i < 20000; ++i) big.push_back(static_cast<uint8_t>(i * 7 % 251));
  write_gz(p, idx_bytes({20, 1000}, big));
  std::vector<uint8_t> gz = read_bytes(p);
  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  write_bytes(p, cut);
  std::string m = message_of([&] { read_idx(p, 2, "mnist"); });
  EXPECT_NE(m.find(p.string()), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  gz[gz.size() - 6] ^= 0xff;  // CRC-32 of the data
  write_bytes(p, gz);
  m = message_of([&] { read_idx(p, 2, "mnist"); });
  EXPECT_NE(m.find(p.string() + " is"), std::string::npos) << m;
  EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
}

TEST(DataIdx, CountMismatchAndBadLabelsAreErrors) {
  TempDir t;
  write_gz(t / "im.gz", images5());
  write_gz(t / "lb.gz", idx_bytes({4}, {0, 1, 2, 3}));
  std::string m = message_of([&] { load_idx_dataset(t / "im.gz", t / "lb.gz", mnist_class_names(), "mnist train"); });
  EXPECT_NE(m.find("holds 5 images but " + (t / "lb.gz").string() + " holds 4 labels"), std::string::npos) << m;
  write_gz(t / "lb.gz", idx_bytes({5}, {0, 1, 2, 10, 3}));
  m = message_of([&] { load_idx_dataset(t / "im.gz", t / "lb.gz", mnist_class_names(), "mnist train"); });
  EXPECT_NE(m.find("lb.gz is corrupt: label 3 is 10, expected 0..9"), std::string::npos) << m;
}
