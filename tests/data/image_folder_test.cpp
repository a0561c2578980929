#include <gtest/gtest.h>

#include "core/error.h"
#include "data/image_folder.h"
#include "data/registry.h"
#include "tests/data/fixtures.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

// An RGB PNG whose pixel (y, x) is (base + y, base + x, base + 100).
void write_png(const fs::path& p, int h, int w, int base) {
  fs::create_directories(p.parent_path());
  std::vector<uint8_t> hwc;  // (H, W, 3)
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) hwc.insert(hwc.end(), {uint8_t(base + y), uint8_t(base + x), uint8_t(base + 100)});
  ASSERT_TRUE(stbi_write_png(p.c_str(), w, h, 3, hwc.data(), w * 3));
}

// root/{bird,cat,dog}: 2, 1 and 2 images of 5 x 4; cat's is nested one folder deeper.
void write_folder(const fs::path& root) {
  write_png(root / "dog" / "b.png", 5, 4, 40);
  write_png(root / "dog" / "a.png", 5, 4, 30);
  write_png(root / "bird" / "1.png", 5, 4, 0);
  write_png(root / "bird" / "2.PNG", 5, 4, 10);
  write_png(root / "cat" / "images" / "c.png", 5, 4, 20);
  write_text(root / "cat" / "notes.txt", "not an image");
}

}  // namespace

TEST(DataImageFolder, ClassesBySortedFolderNameAndPixelsInChwOrder) {
  TempDir t;
  write_folder(t.path());
  for (bool preload : {false, true}) {
    ImageFolderDataset ds(t.path(), {.preload = preload});
    ASSERT_EQ(ds.size(), 5);
    EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"bird", "cat", "dog"}));
    EXPECT_EQ(ds.image_shape(), (ImageShape{3, 5, 4}));
    const std::vector<int64_t> labels = {0, 0, 1, 2, 2};
    const std::vector<int> bases = {0, 10, 20, 30, 40};  // sorted paths: bird/1, bird/2, cat/images/c, dog/a, dog/b
    std::vector<uint8_t> img(60);  // (3, 5, 4)
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(ds.get(i, img.data()), labels[i]);
      EXPECT_EQ(ds.label(i), labels[i]);
      for (int y = 0; y < 5; ++y)
        for (int x = 0; x < 4; ++x) {
          ASSERT_EQ(img[(0 * 5 + y) * 4 + x], bases[i] + y);
          ASSERT_EQ(img[(1 * 5 + y) * 4 + x], bases[i] + x);
          ASSERT_EQ(img[(2 * 5 + y) * 4 + x], bases[i] + 100);
        }
    }
  }
}

TEST(DataImageFolder, ResizeOnLoadAndGreyscale) {
  TempDir t;
  write_folder(t.path());
  write_png(t / "dog" / "big.png", 10, 8, 50);  // another size: fine with a resize
  ImageFolderDataset ds(t.path(), {.height = 8, .width = 6, .channels = 1, .preload = true});
  EXPECT_EQ(ds.image_shape(), (ImageShape{1, 8, 6}));
  ASSERT_EQ(ds.size(), 6);
  std::vector<uint8_t> img(48);
  ds.get(0, img.data());
  // Grey of (y, x, 100) is a weighted sum, so it grows down and right; corners stay in range.
  EXPECT_LT(img[0], img[47]);
}

TEST(DataImageFolder, CorruptImageAndMixedSizesAreErrorsNamingTheFile) {
  TempDir t;
  write_folder(t.path());
  write_text(t / "cat" / "broken.png", "\x89PNG but not really");
  std::string m = message_of([&] { ImageFolderDataset(t.path(), {.preload = true}); });
  EXPECT_NE(m.find("image_folder: " + (t / "cat" / "broken.png").string() + " cannot be decoded"), std::string::npos) << m;
  ImageFolderDataset lazy(t.path(), {});
  std::vector<uint8_t> img(60);
  m = message_of([&] { lazy.get(2, img.data()); });  // bird/1, bird/2, then cat/broken.png (before cat/images/)
  EXPECT_NE(m.find("broken.png cannot be decoded"), std::string::npos) << m;

  fs::remove(t / "cat" / "broken.png");
  write_png(t / "cat" / "wide.png", 5, 9, 0);
  m = message_of([&] { ImageFolderDataset(t.path(), {.preload = true}); });
  EXPECT_NE(m.find("wide.png is 5x9 but " + (t / "bird" / "1.png").string() + " is 5x4"), std::string::npos) << m;
  m = message_of([&] { ImageFolderDataset(t / "nothing", {}); });
  EXPECT_NE(m.find("is not a directory"), std::string::npos) << m;
}

TEST(DataImageFolder, TinyImageNetValidationLayoutAndRegistrySplits) {
  TempDir t;
  write_folder(t / "train");
  write_png(t / "val" / "images" / "val_0.png", 5, 4, 7);
  write_png(t / "val" / "images" / "val_1.png", 5, 4, 8);
  write_text(t / "val" / "val_annotations.txt", "val_0.png\tdog\t0\t0\t4\t4\nval_1.png\tbird\t1\t1\t3\t3\n");
  DatasetSpec spec{.name = "image_folder", .root = t.path().string(), .split = Split::Test};
  auto val = open_dataset(spec);
  ASSERT_EQ(val->size(), 2);
  EXPECT_EQ(val->num_classes(), 3);  // the train split's classes
  EXPECT_EQ(val->label(0), 2);
  EXPECT_EQ(val->label(1), 0);
  spec.split = Split::Train;
  EXPECT_EQ(open_dataset(spec)->size(), 5);
  spec.root.clear();
  EXPECT_NE(message_of([&] { open_dataset(spec); }).find("data.root is required"), std::string::npos);
}
