#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/cpu/layout.h"
#include "core/tensor.h"

using namespace packrat;

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
