#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/allocator.h"
#include "core/error.h"
#include "data/loader.h"

using namespace packrat;
using namespace packrat::data;

namespace {

// n images of (1, 2, 2) whose pixels encode the sample index: [i % 256, i / 256, 7, 9].
std::shared_ptr<InMemoryDataset> numbered(int64_t n) {
  std::vector<uint8_t> px;     // (N, 1, 2, 2)
  std::vector<int64_t> labels; // (N)
  for (int64_t i = 0; i < n; ++i) {
    px.insert(px.end(), {static_cast<uint8_t>(i % 256), static_cast<uint8_t>(i / 256), 7, 9});
    labels.push_back(i % 10);
  }
  return std::make_shared<InMemoryDataset>("numbered", ImageShape{1, 2, 2},
                                           std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"},
                                           std::move(px), std::move(labels));
}

int64_t decode_index(const float* img) { return std::lround(img[0] * 255) + 256 * std::lround(img[1] * 255); }

std::vector<Batch> whole_epoch(Loader& l, int64_t epoch, int64_t first = 0) {
  l.start_epoch(epoch, first);
  std::vector<Batch> out;
  for (Batch b; l.next(b);) out.push_back(b);
  return out;
}

class Failing : public Dataset {
 public:
  const std::string& name() const override { return name_; }
  int64_t size() const override { return 50; }
  ImageShape image_shape() const override { return {1, 1, 1}; }
  int64_t num_classes() const override { return 1; }
  const std::vector<std::string>& class_names() const override { return names_; }
  int64_t get(int64_t i, uint8_t* chw) const override {
    if (i == 33) fail("failing: sample 33 is unreadable");
    chw[0] = 1;
    return 0;
  }
  int64_t label(int64_t) const override { return 0; }

 private:
  std::string name_ = "failing";
  std::vector<std::string> names_ = {"x"};
};

// Runs out of host memory on sample 3.
class Exhausting : public Failing {
 public:
  int64_t get(int64_t i, uint8_t* chw) const override {
    if (i == 3) throw std::bad_alloc();
    chw[0] = 1;
    return 0;
  }
};

}  // namespace

TEST(DataLoader, DeliversEverySampleExactlyOncePerEpoch) {
  Loader l(numbered(1003), Pipeline(), {.batch_size = 64, .shuffle = true, .seed = 5, .threads = 2});
  EXPECT_EQ(l.batches_per_epoch(), 16);
  for (int64_t epoch : {0, 1}) {
    const std::vector<Batch> batches = whole_epoch(l, epoch);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), 16);
    std::vector<int64_t> all;
    for (const Batch& b : batches) {
      const int64_t n = b.images.dim(0);
      EXPECT_EQ(n, b.index == 15 ? 1003 - 15 * 64 : 64);
      EXPECT_EQ(b.images.shape(), (Shape{n, 1, 2, 2}));
      EXPECT_EQ(b.images.dtype(), DType::f32);
      EXPECT_EQ(b.labels.shape(), (Shape{n}));
      EXPECT_EQ(b.labels.dtype(), DType::i64);
      EXPECT_EQ(b.epoch, epoch);
      for (int64_t i = 0; i < n; ++i) {
        const float* img = b.images.data<float>() + 4 * i;
        ASSERT_EQ(decode_index(img), b.indices[i]);
        ASSERT_FLOAT_EQ(img[3], 9.0f / 255.0f);
        ASSERT_EQ(b.labels.data<int64_t>()[i], b.indices[i] % 10);
        all.push_back(b.indices[i]);
      }
    }
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> want(1003);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want);
    EXPECT_EQ(all, l.order(epoch));
    EXPECT_NE(all, want);  // shuffled
  }
}

TEST(DataLoader, ShuffleDependsOnlyOnSeedAndEpoch) {
  auto ds = numbered(500);
  Loader a(ds, Pipeline(), {.batch_size = 32, .seed = 11});
  Loader b(ds, Pipeline(), {.batch_size = 100, .seed = 11});
  Loader c(ds, Pipeline(), {.batch_size = 32, .seed = 12});
  Loader plain(ds, Pipeline(), {.batch_size = 32, .shuffle = false, .seed = 11});
  EXPECT_EQ(a.order(0), b.order(0));  // batch size plays no part
  EXPECT_EQ(a.order(4), b.order(4));
  EXPECT_NE(a.order(0), a.order(1));
  EXPECT_NE(a.order(0), c.order(0));
  std::vector<int64_t> identity(500);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(plain.order(3), identity);
}

TEST(DataLoader, ResumingMidEpochReproducesTheBatchesAugmentationsIncluded) {
  auto ds = numbered(300);
  LoaderOptions o{.batch_size = 40, .seed = 99};
  Loader first(ds, parse_pipeline({"random_crop(2, 1)", "hflip"}), o);
  Loader resumed(ds, parse_pipeline({"random_crop(2, 1)", "hflip"}), o);
  const std::vector<Batch> full = whole_epoch(first, 3);
  const std::vector<Batch> tail = whole_epoch(resumed, 3, 5);
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(tail.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(tail[j].index, full[5 + j].index);
    EXPECT_EQ(tail[j].indices, full[5 + j].indices);
    EXPECT_EQ(tail[j].images.to_vector(), full[5 + j].images.to_vector());
  }
  const std::vector<Batch> other = whole_epoch(first, 4);
  EXPECT_NE(other[0].images.to_vector(), full[0].images.to_vector());
}

TEST(DataLoader, LimitUsesTheFirstSamplesAndDropLastDropsThePartialBatch) {
  Loader l(numbered(1000), Pipeline(), {.batch_size = 8, .drop_last = true, .seed = 3, .limit = 30});
  EXPECT_EQ(l.size(), 30);
  EXPECT_EQ(l.batches_per_epoch(), 3);
  std::set<int64_t> seen;
  for (const Batch& b : whole_epoch(l, 0)) {
    EXPECT_EQ(b.images.dim(0), 8);
    for (int64_t i : b.indices) {
      EXPECT_LT(i, 30);
      EXPECT_TRUE(seen.insert(i).second);
    }
  }
  EXPECT_EQ(seen.size(), 24u);
  Loader big(numbered(10), Pipeline(), {.batch_size = 4, .limit = 1000});
  EXPECT_EQ(big.size(), 10);
  EXPECT_EQ(big.batches_per_epoch(), 3);
}

TEST(DataLoader, BatchesAreTaggedDataAndFreedWithTheBatch) {
  auto& alloc = Allocator::cpu();
  const int64_t before = alloc.current(MemTag::Data);
  {
    Loader l(numbered(64), Pipeline(), {.batch_size = 64, .prefetch = 1});
    l.start_epoch(0);
    Batch b;
    ASSERT_TRUE(l.next(b));
    EXPECT_GE(alloc.current(MemTag::Data) - before, 64 * 4 * 4 + 64 * 8);
    EXPECT_FALSE(l.next(b));
    EXPECT_FALSE(l.next(b));
  }
  EXPECT_EQ(alloc.current(MemTag::Data), before);
}

// When next() returns batch j, the Data bytes alive are batch j's and those of the `prefetch`
// batches after it (allocated on the caller's thread), whatever the background thread has done:
// a training step's memory peak repeats from run to run. (When the background thread allocated
// them, the next batch did or did not exist yet, by a race.)
TEST(DataLoader, TheBatchesAliveAtEachStepAreTheCurrentOneAndThePrefetchedOnes) {
  const auto dataset = numbered(96);  // (its pixels are Data too)
  auto& alloc = Allocator::cpu();
  const int64_t before = alloc.current(MemTag::Data);
  const int64_t batch_bytes = 16 * 4 * 4 + 16 * 8;  // (16, 1, 2, 2) f32 and (16) i64: 64-byte blocks
  for (int64_t prefetch : {1, 2, 3}) {
    Loader l(dataset, Pipeline(), {.batch_size = 16, .prefetch = prefetch});  // 6 batches
    l.start_epoch(0);
    for (int64_t j = 0; j < 6; ++j) {
      Batch b;
      ASSERT_TRUE(l.next(b));
      const int64_t alive = 1 + std::min<int64_t>(prefetch, 5 - j);
      EXPECT_EQ(alloc.current(MemTag::Data) - before, alive * batch_bytes) << "prefetch " << prefetch << ", batch " << j;
    }
    Batch b;
    EXPECT_FALSE(l.next(b));
  }
  EXPECT_EQ(alloc.current(MemTag::Data), before);
}

TEST(DataLoader, ErrorsOfTheBackgroundThreadReachTheCaller) {
  Loader l(std::make_shared<Failing>(), Pipeline(), {.batch_size = 10, .shuffle = false});
  l.start_epoch(0);
  Batch b;
  int delivered = 0;
  try {
    while (l.next(b)) ++delivered;
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "failing: sample 33 is unreadable");
  }
  EXPECT_EQ(delivered, 3);
}

TEST(DataLoader, StopsCleanlyMidEpochAndRestarts) {
  auto ds = numbered(2000);
  for (int round = 0; round < 5; ++round) {
    Loader l(ds, Pipeline(), {.batch_size = 10, .prefetch = 2});
    l.start_epoch(0);
    Batch b;
    ASSERT_TRUE(l.next(b));
    l.start_epoch(1);  // abandons epoch 0 while its thread waits on a full queue
    ASSERT_TRUE(l.next(b));
    EXPECT_EQ(b.epoch, 1);
    EXPECT_EQ(b.index, 0);
  }  // destroyed with batches pending
  Loader l(ds, Pipeline(), {.batch_size = 10});
  Batch b;
  EXPECT_THROW(l.next(b), Error);  // before start_epoch
  EXPECT_THROW(Loader(ds, Pipeline(), {.batch_size = 0}), Error);
}

// Host memory running out while a batch is prepared is a packrat::Error naming the loader (exit 2),
// not an internal std::bad_alloc; images larger than kMaxImageValues are refused up front.
TEST(DataLoader, HostMemoryAndImageSizeLimitsAreErrors) {
  Loader l(std::make_shared<Exhausting>(), Pipeline(), {.batch_size = 10, .shuffle = false});
  l.start_epoch(0);
  Batch b;
  try {
    while (l.next(b)) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loader failing: out of host memory"), std::string::npos) << e.what();
  }
  try {
    Loader big(numbered(4), parse_pipeline({"resize(65536)"}), {.batch_size = 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loader numbered: the transforms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(1, 65536, 65536)"), std::string::npos) << e.what();
  }
}
