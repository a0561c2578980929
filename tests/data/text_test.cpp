// data.dataset: text — the bytes of a file or folder, the 90/10 split, next-byte windows and the
// loader's token batches; errors that name the config key.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/loader.h"
#include "data/registry.h"
#include "data/text.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

const std::string kFixture = std::string(PACKRAT_SOURCE_DIR) + "/tests/data/text/gpl3_excerpt.txt";

DatasetSpec text_spec(const std::string& root, int64_t seq_len, Split split = Split::Train) {
  DatasetSpec s;
  s.name = "text";
  s.root = root;
  s.seq_len = seq_len;
  s.split = split;
  return s;
}

}  // namespace

TEST(TextDataset, SplitsTheFileNinetyTenAndCutsNextByteWindows) {
  const std::vector<uint8_t> bytes = read_bytes(kFixture);
  const auto size = static_cast<int64_t>(bytes.size());
  ASSERT_GT(size, 5000);
  const int64_t cut = static_cast<int64_t>(static_cast<double>(size) * 0.9);
  EXPECT_EQ(text_split_range(size, Split::Train), (std::pair<int64_t, int64_t>{0, cut}));
  EXPECT_EQ(text_split_range(size, Split::Test), (std::pair<int64_t, int64_t>{cut, size}));

  const int64_t t = 64;
  auto train = open_dataset(text_spec(kFixture, t));
  auto val = open_dataset(text_spec(kFixture, t, Split::Test));
  EXPECT_EQ(train->size(), (cut - 1) / t);
  EXPECT_EQ(val->size(), (size - cut - 1) / t);
  EXPECT_EQ(train->num_classes(), 256);
  EXPECT_EQ(train->image_shape(), (ImageShape{1, 1, t}));
  // Window i of the validation split starts at byte cut + i * T; its label is the byte after it.
  const auto& v = dynamic_cast<const TextDataset&>(*val);
  const int64_t i = val->size() - 1;
  for (int64_t j = 0; j <= t; ++j) ASSERT_EQ(v.window(i)[j], bytes[cut + i * t + j]) << j;
  EXPECT_EQ(val->label(i), bytes[cut + i * t + t]);
}

TEST(TextDataset, LoaderGivesTokensAndNextByteTargets) {
  const std::vector<uint8_t> bytes = read_bytes(kFixture);
  const int64_t t = 16;
  auto train = open_dataset(text_spec(kFixture, t));
  Loader loader(train, Pipeline{}, {.batch_size = 8, .shuffle = true, .seed = 3});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_EQ(b.images.dtype(), DType::i64);
  ASSERT_EQ(b.images.shape(), (Shape{8, t}));
  ASSERT_EQ(b.labels.shape(), (Shape{8, t}));
  const int64_t* tok = b.images.data<int64_t>();
  const int64_t* tgt = b.labels.data<int64_t>();
  for (int64_t n = 0; n < 8; ++n) {
    const int64_t start = b.indices[n] * t;  // the train split starts at byte 0
    for (int64_t j = 0; j < t; ++j) {
      ASSERT_EQ(tok[n * t + j], bytes[start + j]);
      ASSERT_EQ(tgt[n * t + j], bytes[start + j + 1]);
    }
  }
}

TEST(TextDataset, FolderConcatenatesTextFilesInPathOrderSkippingBinariesAndLinks) {
  TempDir d;
  std::filesystem::create_directories(d / "b");
  write_text(d / "b" / "two.txt", "world!\n");
  write_text(d / "a.txt", "hello ");
  write_bytes(d / "a.txt.dat", {1, 0, 2, 3});  // a NUL byte: binary, skipped
  std::filesystem::create_symlink(d / "a.txt", d / "a.u8");  // a link: not followed
  const std::vector<uint8_t> text = read_text_bytes(d.path(), "data.root");
  EXPECT_EQ(std::string(text.begin(), text.end()), "hello world!\n");
}

TEST(TextDataset, ErrorsNameTheKey) {
  TempDir d;
  EXPECT_NE(message_of([&] { open_dataset(text_spec((d / "missing").string(), 8)); }).find("data.root"),
            std::string::npos);
  EXPECT_NE(message_of([&] { open_dataset(text_spec("", 8)); }).find("data.root is required"), std::string::npos);
  write_text(d / "empty.txt", "");
  EXPECT_NE(message_of([&] { open_dataset(text_spec((d / "empty.txt").string(), 8)); }).find("is empty"),
            std::string::npos);
  std::filesystem::create_directories(d / "bin");
  write_bytes(d / "bin" / "x.dat", {0, 0});
  EXPECT_NE(message_of([&] { open_dataset(text_spec((d / "bin").string(), 8)); }).find("1 skipped as binary"),
            std::string::npos);
  EXPECT_NE(message_of([&] { open_dataset(text_spec(kFixture, 0)); }).find("data.seq_len is 0"), std::string::npos);
  // The validation split of the fixture is about 600 bytes: a window of 1000 does not fit.
  const std::string too_long = message_of([&] { open_dataset(text_spec(kFixture, 1000, Split::Test)); });
  EXPECT_NE(too_long.find("data.seq_len is 1000, longer than the text"), std::string::npos) << too_long;
  auto ds = open_dataset(text_spec(kFixture, 8));
  EXPECT_NE(message_of([&] { Loader l(ds, parse_pipeline({"hflip"}), {}); }).find("takes no transforms"),
            std::string::npos);
}
