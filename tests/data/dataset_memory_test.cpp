#include <gtest/gtest.h>

#include "core/allocator.h"
#include "data/dataset.h"

using namespace packrat;
using namespace packrat::data;

TEST(DataDatasetMemory, DecodedImagesAreCountedUnderTheDataTag) {
  const int64_t before = Allocator::cpu().current(MemTag::Data);
  {
    std::vector<uint8_t> pixels(5 * 1 * 4 * 4, 7);  // (5, 1, 4, 4)
    InMemoryDataset d("tiny", ImageShape{1, 4, 4}, {"a", "b"}, pixels, {0, 1, 0, 1, 1});
    EXPECT_EQ(Allocator::cpu().current(MemTag::Data) - before, 80);
    uint8_t img[16];
    EXPECT_EQ(d.get(3, img), 1);
    EXPECT_EQ(img[15], 7);
  }
  EXPECT_EQ(Allocator::cpu().current(MemTag::Data), before);
}
