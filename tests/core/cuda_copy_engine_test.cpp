// A device's copy engine (core/copy_engine.h): a tensor out to the host pool and back through the
// two side streams, the engine's times, and the errors naming bad copies and events. Compiled
// always; the GPU tests (suite CudaDevice, which scripts/device_check.sh runs) skip with a one-line
// reason when no GPU is visible, the others run everywhere.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/backend.h"
#include "core/copy_engine.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

using testing::message_of;

// A page-locked source that refuses everything, as one does when the system's limit is reached.
class RefusingSource final : public MemorySource {
 public:
  void* allocate(size_t) override { return nullptr; }
  void release(void*, size_t) override { ADD_FAILURE() << "a heap block went back to the pinned source"; }
  size_t min_cached_bytes() const override { return 0; }
};

TEST(CopyEngine, TheCpuHasNone) { EXPECT_EQ(backend(Device::cpu()).copy_engine(), nullptr); }

TEST(CopyEngine, APoolWhosePinnedMemoryRunsOutTakesTheHeapAndCountsIt) {
  auto source = std::make_unique<PinnedWithFallback>(std::make_unique<RefusingSource>(), "test pool");
  PinnedWithFallback& fallback = *source;
  Allocator pool(Device::cpu(), std::move(source));
  {
    Tensor t = Tensor::empty_in(pool, {256}, DType::f32, Layout::Plain, MemTag::Saved);
    EXPECT_TRUE(t.is_cpu());
    t.data<float>()[255] = 1.0f;  // a usable heap block
    EXPECT_EQ(pool.current(MemTag::Saved), 1024);
    EXPECT_EQ(fallback.pageable_bytes(), 1024);
  }
  EXPECT_EQ(pool.current(MemTag::Saved), 0);
  EXPECT_EQ(fallback.pageable_bytes(), 1024);  // cached for the next step
  pool.empty_cache();
  EXPECT_EQ(fallback.pageable_bytes(), 0);
}

TEST(CudaDevice, CopyEngineMovesATensorToTheHostAndBack) {
  PACKRAT_SKIP_WITHOUT_GPU();
  Backend& gpu = backend(Device::cuda(0));
  CopyEngine* engine = gpu.copy_engine();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(gpu.copy_engine(), engine);  // made once
  engine->take_times();                  // what earlier tests left
  const int64_t n = 1 << 20;
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 0.0f);
  const Tensor x = Tensor::from_vector({n}, values).to(Device::cuda(0));

  Tensor host = Tensor::empty_in(engine->host_pool(), {n}, DType::f32, Layout::Plain, MemTag::Saved);
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(engine->host_pool().current(MemTag::Saved), 4 * n);
  const CopyEvent out = engine->copy(CopyDirection::ToHost, x, host, 0, "x");
  EXPECT_NE(out, 0u);
  Tensor back = Tensor::empty({n}, DType::f32, Layout::Plain, MemTag::Activation, Device::cuda(0));
  const CopyEvent in = engine->copy(CopyDirection::ToDevice, host, back, out, "x, back");
  EXPECT_NE(in, 0u);
  EXPECT_NE(in, out);

  // The compute stream's copy to the host below runs after the copy back (compute_wait).
  engine->compute_wait(in);
  EXPECT_EQ(back.to(Device::cpu()).to_vector(), values);
  engine->host_wait(out);
  EXPECT_TRUE(engine->done(out));
  EXPECT_EQ(std::vector<float>(host.data<float>(), host.data<float>() + n), values);
  engine->host_wait(in);
  EXPECT_TRUE(engine->done(in));
  engine->forget(out);
  engine->forget(in);

  const CopyTimes t = engine->take_times();
  EXPECT_EQ(t.copies, 2);
  EXPECT_EQ(t.bytes_to_host, 4 * n);
  EXPECT_EQ(t.bytes_to_device, 4 * n);
  EXPECT_GT(t.busy_s, 0.0);
  EXPECT_LT(t.busy_s, 1.0);  // 8 MiB over PCIe: about a millisecond
  const CopyTimes again = engine->take_times();
  EXPECT_EQ(again.copies, 0);
  EXPECT_EQ(again.bytes_to_host + again.bytes_to_device, 0);
  EXPECT_EQ(engine->pageable_bytes(), 0);

  // A copy forgotten while it may still run is counted once it completes: the next copy on its
  // stream runs after it.
  const CopyEvent forgotten = engine->copy(CopyDirection::ToHost, x, host, 0, "x again");
  engine->forget(forgotten);
  const CopyEvent last = engine->copy(CopyDirection::ToHost, x, host, 0, "x once more");
  engine->host_wait(last);
  const CopyTimes both = engine->take_times();
  EXPECT_EQ(both.copies, 2);
  EXPECT_EQ(both.bytes_to_host, 8 * n);
  engine->forget(last);
}

TEST(CudaDevice, CopyEngineNamesBadCopiesAndUnknownEvents) {
  PACKRAT_SKIP_WITHOUT_GPU();
  CopyEngine& engine = *backend(Device::cuda(0)).copy_engine();
  const Tensor x = Tensor::zeros({4}).to(Device::cuda(0));
  Tensor three = Tensor::empty_in(engine.host_pool(), {3}, DType::f32, Layout::Plain, MemTag::Saved);
  Tensor four = Tensor::empty_in(engine.host_pool(), {4}, DType::f32, Layout::Plain, MemTag::Saved);
  Tensor on_gpu = Tensor::zeros({4}).to(Device::cuda(0));

  std::string m = message_of([&] { engine.copy(CopyDirection::ToHost, x, three, 0, "layer1's x"); });
  EXPECT_TRUE(m.starts_with("layer1's x: copy to the host on cuda:0: ")) << m;
  m = message_of([&] { engine.copy(CopyDirection::ToHost, x, on_gpu, 0, "layer1's x"); });
  EXPECT_TRUE(m.starts_with("layer1's x: copy to the host on cuda:0: the destination is on cuda:0")) << m;
  m = message_of([&] { engine.copy(CopyDirection::ToDevice, x, on_gpu, 0, "layer1's x"); });
  EXPECT_TRUE(m.starts_with("layer1's x: copy to the device on cuda:0: the source is on cuda:0")) << m;

  m = message_of([&] { engine.done(0); });
  EXPECT_NE(m.find("copy event 0"), std::string::npos) << m;
  m = message_of([&] { engine.host_wait(CopyEvent{1} << 50); });
  EXPECT_NE(m.find("unknown"), std::string::npos) << m;
  m = message_of([&] { engine.copy(CopyDirection::ToDevice, four, on_gpu, CopyEvent{1} << 50, "layer1's x"); });
  EXPECT_NE(m.find("unknown"), std::string::npos) << m;

  const CopyEvent e = engine.copy(CopyDirection::ToHost, x, four, 0, "layer1's x");
  engine.host_wait(e);
  engine.forget(e);
  m = message_of([&] { engine.compute_wait(e); });
  EXPECT_NE(m.find("forgotten"), std::string::npos) << m;
  m = message_of([&] { engine.forget(e); });
  EXPECT_NE(m.find("forgotten"), std::string::npos) << m;
}

}  // namespace
}  // namespace packrat
