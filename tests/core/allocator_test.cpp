#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/cpu/layout.h"
#include "core/tensor.h"

using namespace packrat;

namespace {
// Hands out addresses it never backs (the allocator never touches a block's bytes), and counts.
// `capacity` > 0: a device of that many bytes, which refuses a block beyond them (cudaMalloc),
// and whose cache has no bound.
class CountingSource final : public MemorySource {
 public:
  explicit CountingSource(int64_t capacity = 0) : capacity_(capacity) {}
  void* allocate(size_t bytes) override {
    if (capacity_ > 0 && held_ + static_cast<int64_t>(bytes) > capacity_) return nullptr;
    ++allocations;
    held_ += static_cast<int64_t>(bytes);
    next_ += bytes;
    return reinterpret_cast<void*>(next_);
  }
  void release(void* p, size_t bytes) override {
    released.push_back(p);
    held_ -= static_cast<int64_t>(bytes);
  }
  size_t min_cached_bytes() const override { return 0; }
  int64_t max_cached_bytes() const override {
    return capacity_ > 0 ? std::numeric_limits<int64_t>::max() : kDefaultMaxCachedBytes;
  }
  int allocations = 0;
  std::vector<void*> released;

 private:
  int64_t capacity_ = 0, held_ = 0;
  uintptr_t next_ = uintptr_t{1} << 40;
};
}  // namespace

TEST(Allocator, CountsBytesPerTagAndReleasesThem) {
  auto& a = Allocator::cpu();
  const int64_t before = a.current(MemTag::Workspace);
  {
    Tensor t = Tensor::empty({10, 10}, DType::f32, Layout::Plain, MemTag::Workspace);
    EXPECT_EQ(a.current(MemTag::Workspace) - before, 400);
    t.storage()->allocation->retag(MemTag::Saved);
    EXPECT_EQ(a.current(MemTag::Workspace), before);
  }
  EXPECT_EQ(a.current(MemTag::Workspace), before);
}

TEST(Allocator, PeakFollowsTheHighestCurrent) {
  auto& a = Allocator::cpu();
  a.reset_peak();
  const int64_t base = a.current(MemTag::Data);
  { Tensor t = Tensor::empty({1000}, DType::f32, Layout::Plain, MemTag::Data); }
  { Tensor t = Tensor::empty({10}, DType::f32, Layout::Plain, MemTag::Data); }
  EXPECT_EQ(a.peak(MemTag::Data) - base, 4000);
}

TEST(Allocator, LayerScopeAttributesBytes) {
  LayerScope outer("layer1");
  LayerScope inner("0.conv1");
  EXPECT_EQ(LayerScope::current(), "layer1.0.conv1");
  Tensor t = Tensor::empty({8}, DType::f32, Layout::Plain, MemTag::Workspace);
  EXPECT_EQ(Allocator::cpu().current_by_layer(MemTag::Workspace).at("layer1.0.conv1"), 32);
}

TEST(Allocator, LimitThrowsOutOfMemoryNamingTheRequest) {
  auto& a = Allocator::cpu();
  a.set_limit(a.total_current() + 1000);
  try {
    Tensor t = Tensor::empty({1000}, DType::f32, Layout::Plain, MemTag::Activation);
    a.set_limit(0);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    a.set_limit(0);
    EXPECT_NE(std::string(e.what()).find("4000 bytes of Activation"), std::string::npos) << e.what();
  }
}

// --find-max-batch tells "does not fit under the limit" from "the device refused memory" by type.
TEST(Allocator, TheLimitIsLimitExceededNotAnyOutOfMemory) {
  auto& a = Allocator::cpu();
  a.set_limit(a.total_current() + 1000);
  bool limit = false;
  try {
    Tensor t = Tensor::empty({1000}, DType::f32, Layout::Plain, MemTag::Activation);
  } catch (const LimitExceeded&) {
    limit = true;
  } catch (const OutOfMemory& e) {
    ADD_FAILURE() << "the limit threw a plain OutOfMemory: " << e.what();
  }
  a.set_limit(0);
  EXPECT_TRUE(limit);
}

TEST(Tensor, BlockedLayoutRoundTrips) {
  std::vector<float> v(2 * 32 * 3 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector({2, 32, 3, 2}, v);
  Tensor b = t.to_layout(Layout::nChw16c);
  EXPECT_EQ(b.data<float>()[cpu::nchw_offset(Layout::nChw16c, 32, 3, 2, 1, 17, 2, 1)],
            v[cpu::nchw_offset(Layout::Plain, 32, 3, 2, 1, 17, 2, 1)]);
  EXPECT_EQ(b.to_vector(), v);
}

TEST(Allocator, FreedBlocksAreReusedWithoutCountingThem) {
  auto& a = Allocator::cpu();
  a.empty_cache();
  const int64_t before = a.current(MemTag::Workspace);
  void* first;
  {
    Tensor t = Tensor::empty({1 << 18}, DType::f32, Layout::Plain, MemTag::Workspace);  // 1 MiB
    first = t.raw();
  }
  EXPECT_EQ(a.current(MemTag::Workspace), before);  // freed as far as the tags are concerned
  EXPECT_EQ(a.cached_bytes(), 1 << 20);              // but kept for the next step
  Tensor again = Tensor::empty({1 << 18}, DType::f32, Layout::Plain, MemTag::Workspace);
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(a.cached_bytes(), 0);
  EXPECT_EQ(a.current(MemTag::Workspace) - before, 1 << 20);
}

TEST(Allocator, ASlightlySmallerRequestReusesACachedBlock) {
  auto& a = Allocator::cpu();
  a.empty_cache();
  void* first;
  { first = Tensor::empty({1 << 18}, DType::u8, Layout::Plain, MemTag::Workspace).raw(); }  // 256 KiB
  Tensor smaller = Tensor::empty({(1 << 18) - 4096}, DType::u8, Layout::Plain, MemTag::Workspace);
  EXPECT_EQ(smaller.raw(), first);
  EXPECT_EQ(a.cached_bytes(), 0);
  Tensor much_smaller = Tensor::empty({1 << 17}, DType::u8, Layout::Plain, MemTag::Workspace);
  EXPECT_NE(much_smaller.raw(), first);
}

// A process that changes workload (a plan profiles thirty options, then trains one) must keep
// the blocks of what it runs now: a full cache that turned the new sizes away sent every step
// to the OS, a page fault per 4 KiB (the BERT plan's steps at batch 101 ran at 0.6x a fresh
// process's speed, a quarter of their time in the kernel).
TEST(Allocator, AFullCacheEvictsTheBlocksFreedLongestAgo) {
  auto owned = std::make_unique<CountingSource>();
  CountingSource& source = *owned;
  Allocator a(Device::cpu(), std::move(owned));
  constexpr size_t kMiB = size_t{1} << 20;
  void* first_freed;
  {  // the first workload fills the cache: 8 blocks of 512 MiB
    std::vector<std::shared_ptr<Allocation>> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(512 * kMiB, MemTag::Activation));
    first_freed = blocks.front()->data();
  }
  ASSERT_EQ(a.cached_bytes(), MemorySource::kDefaultMaxCachedBytes);
  for (int step = 0; step < 3; ++step) {  // the next: two blocks of 100 MiB a step
    auto x = a.allocate(100 * kMiB, MemTag::Activation);
    auto y = a.allocate(100 * kMiB, MemTag::Activation);
  }
  EXPECT_EQ(source.allocations, 8 + 2) << "the later steps take the first step's blocks from the cache";
  ASSERT_EQ(source.released.size(), 1u) << "one 512 MiB block makes room for both";
  EXPECT_EQ(source.released[0], first_freed) << "the block freed longest ago";
  EXPECT_EQ(a.cached_bytes(), static_cast<int64_t>(7 * 512 * kMiB + 200 * kMiB));
}

// A GPU's cache has no bound (a step's freed blocks are the next step's; cudaMalloc and cudaFree
// synchronise the device): its blocks stay cached past the heap's 4 GiB, and when the device
// refuses a block the allocator gives the cache back and asks again.
TEST(Allocator, ADevicesCacheKeepsEveryFreedBlockAndEmptiesWhenTheDeviceRefuses) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  auto owned = std::make_unique<CountingSource>(10 * kGiB);
  CountingSource& device = *owned;
  Allocator a(Device::cpu(), std::move(owned));
  {
    std::vector<std::shared_ptr<Allocation>> step;  // 8 GiB of activations, freed at the step's end
    for (int i = 0; i < 8; ++i) step.push_back(a.allocate(kGiB, MemTag::Activation));
  }
  EXPECT_EQ(a.cached_bytes(), 8 * kGiB);
  EXPECT_TRUE(device.released.empty());
  {  // the next step takes them all from the cache
    std::vector<std::shared_ptr<Allocation>> step;
    for (int i = 0; i < 8; ++i) step.push_back(a.allocate(kGiB, MemTag::Activation));
    EXPECT_EQ(device.allocations, 8);
  }
  // 4 GiB of another size: the device holds 8 GiB of cached blocks and refuses, so the allocator
  // empties its cache and asks again.
  auto other = a.allocate(4 * kGiB, MemTag::Activation);
  EXPECT_EQ(device.allocations, 9);
  EXPECT_EQ(device.released.size(), 8u);
  EXPECT_EQ(a.cached_bytes(), 0);
}
