#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/idx.h"
#include "data/registry.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

TEST(DataRegistry, FashionMnistFromTheDebianPackage) {
  const std::string root = default_root("fashion_mnist");
  if (!std::filesystem::exists(idx_images_file(root, Split::Train)))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << root << ")";
  auto train = open_dataset({.name = "fashion_mnist"});
  auto test = open_dataset({.name = "fashion_mnist", .split = Split::Test});
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->image_shape(), (ImageShape{1, 28, 28}));
  EXPECT_EQ(train->class_names()[0], "T-shirt/top");
  std::vector<int64_t> per_class(10);
  for (int64_t i = 0; i < train->size(); ++i) ++per_class[train->label(i)];
  for (int64_t n : per_class) EXPECT_EQ(n, 6000);  // Fashion-MNIST is balanced
  std::vector<uint8_t> img(784);
  test->get(0, img.data());
  int nonzero = 0;
  for (uint8_t p : img) nonzero += p != 0;
  EXPECT_GT(nonzero, 100);
}

TEST(DataRegistry, MnistAndCifar100FromARootFolder) {
  TempDir t;
  write_gz(idx_images_file(t.path(), Split::Test), idx_bytes({2, 3, 3}, std::vector<uint8_t>(18, 5)));
  write_gz(idx_labels_file(t.path(), Split::Test), idx_bytes({2}, {4, 2}));
  auto m = open_dataset({.name = "mnist", .root = t.path().string(), .split = Split::Test, .download = true});
  EXPECT_EQ(m->size(), 2);
  EXPECT_EQ(m->name(), "mnist test");
  EXPECT_EQ(m->class_names()[4], "4");

  write_bytes(t / "cifar-100-binary" / "train.bin", cifar_records({{3, 57}, {19, 99}}));
  auto coarse = open_dataset({.name = "cifar100", .root = t.path().string(), .label = "coarse"});
  EXPECT_EQ(coarse->num_classes(), 20);
  EXPECT_EQ(coarse->label(1), 19);
  EXPECT_NE(message_of([&] { open_dataset({.name = "cifar100", .root = t.path().string(), .label = "medium"}); })
                .find("unknown label 'medium'"),
            std::string::npos);
}

TEST(DataRegistry, MissingDatasetsSayWhereTheyLookedAndHowToGetThem) {
  TempDir t;
  std::string m = message_of([&] { open_dataset({.name = "mnist", .root = t.path().string()}); });
  EXPECT_NE(m.find("mnist: dataset not found: looked for " + idx_images_file(t.path(), Split::Train).string()), std::string::npos) << m;
  EXPECT_NE(m.find("train-labels-idx1-ubyte.gz"), std::string::npos) << m;
  m = message_of([&] { open_dataset({.name = "fashion_mnist", .root = t.path().string(), .download = true}); });
  EXPECT_NE(m.find("install the Debian package dataset-fashion-mnist"), std::string::npos) << m;
  EXPECT_NE(m.find("data.download can fetch only cifar10 and cifar100"), std::string::npos) << m;
  m = message_of([&] { open_dataset({.name = "cifar100", .root = t.path().string(), .split = Split::Test}); });
  EXPECT_NE(m.find("looked for " + (t.path() / "cifar-100-binary" / "test.bin").string() + " and " +
                   (t.path() / "test.bin").string()),
            std::string::npos) << m;
  EXPECT_NE(m.find("cifar-100-binary.tar.gz"), std::string::npos) << m;
  m = message_of([&] { open_dataset({.name = "svhn"}); });
  EXPECT_EQ(m, "data: unknown dataset 'svhn' (known: cifar10, cifar100, fashion_mnist, mnist, image_folder, text, "
               "text_classes)");
  EXPECT_EQ(parse_split("val"), Split::Test);
  EXPECT_THROW(parse_split("dev"), Error);
}
