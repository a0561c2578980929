#include <gtest/gtest.h>

#include "core/error.h"
#include "data/cifar.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

// Five train batches of 3 records each and a test batch of 4: labels record % 10.
void write_cifar10(const fs::path& dir) {
  for (int b = 1; b <= 5; ++b) {
    std::vector<std::vector<uint8_t>> labels;
    for (int r = 0; r < 3; ++r) labels.push_back({static_cast<uint8_t>(((b - 1) * 3 + r) % 10)});
    write_bytes(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifar_records(labels, (b - 1) * 3));
  }
  write_bytes(dir / "test_batch.bin", cifar_records({{9}, {8}, {7}, {6}}, 100));
}


}  // namespace

TEST(DataCifar10, DecodesRecordsOfAllTrainBatchesInOrder) {
  TempDir t;
  write_cifar10(t.path());
  auto ds = load_cifar10(t.path(), Split::Train);
  ASSERT_EQ(ds->size(), 15);
  EXPECT_EQ(ds->image_shape(), (ImageShape{3, 32, 32}));
  EXPECT_EQ(ds->num_classes(), 10);
  EXPECT_EQ(ds->class_names()[0], "airplane");
  EXPECT_EQ(ds->class_names()[9], "truck");
  std::vector<uint8_t> img(3072);  // (3, 32, 32)
  for (int64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(ds->get(i, img.data()), i % 10);
    EXPECT_EQ(ds->label(i), i % 10);
    // Channel-major: byte k of the record's pixel block is (c, y, x) = (k / 1024, k / 32 % 32, k % 32).
    for (int64_t k : {0, 1, 31, 32, 1023, 1024, 2048 + 32 * 5 + 7, 3071}) EXPECT_EQ(img[k], fixture_pixel(i, k)) << i << " " << k;
  }
}

TEST(DataCifar10, TestSplitAndClassNamesFromMeta) {
  TempDir t;
  write_cifar10(t.path());
  write_text(t / "batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n");
  auto ds = load_cifar10(t.path(), Split::Test);
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->label(0), 9);
  EXPECT_EQ(ds->label(3), 6);
  EXPECT_EQ(ds->class_names()[9], "j");
  EXPECT_EQ(ds->pixels(2)[100], fixture_pixel(102, 100));
}

TEST(DataCifar10, TruncatedBatchNamesTheFileAndTheMissingBytes) {
  TempDir t;
  write_cifar10(t.path());
  std::vector<uint8_t> bytes = cifar_records({{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {0}});
  bytes.resize(bytes.size() - 100);
  write_bytes(t / "data_batch_3.bin", bytes);
  const std::string m = message_of([&] { load_cifar10(t.path(), Split::Train); });
  EXPECT_NE(m.find((t / "data_batch_3.bin").string() + " is truncated: 100 bytes of record 9 missing"), std::string::npos) << m;
  EXPECT_EQ(m.rfind("cifar10:", 0), 0u) << m;
}

TEST(DataCifar10, CorruptLabelEmptyAndMissingFilesAreClearErrors) {
  TempDir t;
  write_cifar10(t.path());
  write_bytes(t / "data_batch_2.bin", cifar_records({{1}, {2}, {3}, {200}}));
  std::string m = message_of([&] { load_cifar10(t.path(), Split::Train); });
  EXPECT_NE(m.find("data_batch_2.bin is corrupt: record 3 has label 200, expected 0..9"), std::string::npos) << m;

  write_bytes(t / "data_batch_2.bin", {});
  m = message_of([&] { load_cifar10(t.path(), Split::Train); });
  EXPECT_NE(m.find("data_batch_2.bin is empty"), std::string::npos) << m;

  fs::remove(t / "data_batch_2.bin");
  m = message_of([&] { load_cifar10(t.path(), Split::Train); });
  EXPECT_NE(m.find("cannot open " + (t / "data_batch_2.bin").string()), std::string::npos) << m;
}

TEST(DataCifar100, FineAndCoarseLabels) {
  TempDir t;
  write_bytes(t / "train.bin", cifar_records({{3, 57}, {19, 99}, {0, 0}}));
  write_bytes(t / "test.bin", cifar_records({{4, 5}}, 7));
  auto fine = load_cifar100(t.path(), Split::Train, Cifar100Label::Fine);
  auto coarse = load_cifar100(t.path(), Split::Train, Cifar100Label::Coarse);
  ASSERT_EQ(fine->size(), 3);
  EXPECT_EQ(fine->num_classes(), 100);
  EXPECT_EQ(coarse->num_classes(), 20);
  EXPECT_EQ(fine->labels(), (std::vector<int64_t>{57, 99, 0}));
  EXPECT_EQ(coarse->labels(), (std::vector<int64_t>{3, 19, 0}));
  EXPECT_EQ(fine->pixels(1)[3071], fixture_pixel(1, 3071));
  EXPECT_EQ(fine->class_names()[57], "fine_57");
  auto test = load_cifar100(t.path(), Split::Test, Cifar100Label::Fine);
  ASSERT_EQ(test->size(), 1);
  EXPECT_EQ(test->label(0), 5);
  EXPECT_EQ(test->pixels(0)[5], fixture_pixel(7, 5));
}

TEST(DataCifar100, CoarseLabelOutOfRangeAndTruncationAreErrors) {
  TempDir t;
  write_bytes(t / "train.bin", cifar_records({{3, 57}, {25, 1}}));
  std::string m = message_of([&] { load_cifar100(t.path(), Split::Train, Cifar100Label::Fine); });
  EXPECT_NE(m.find("train.bin is corrupt: record 1 has coarse label 25, expected 0..19"), std::string::npos) << m;
  std::vector<uint8_t> bytes = cifar_records({{3, 57}, {2, 1}});
  bytes.pop_back();
  write_bytes(t / "train.bin", bytes);
  m = message_of([&] { load_cifar100(t.path(), Split::Train, Cifar100Label::Coarse); });
  EXPECT_NE(m.find("train.bin is truncated: 1 bytes of record 1 missing"), std::string::npos) << m;
}
