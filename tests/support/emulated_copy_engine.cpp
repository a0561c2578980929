#include "tests/support/emulated_copy_engine.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace packrat::testing {

// The "page-locked" memory of the emulation: the heap, refusing blocks above a size on request.
class EmulatedCopyEngine::RefusingHeap final : public MemorySource {
 public:
  void* allocate(size_t bytes) override {
    if (refuse_above_ >= 0 && static_cast<int64_t>(bytes) > refuse_above_) return nullptr;
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void release(void* p, size_t) override { std::free(p); }
  size_t min_cached_bytes() const override { return 0; }
  int64_t refuse_above_ = -1;
};

EmulatedCopyEngine::EmulatedCopyEngine(Device device) : device_(device) { reset(); }

void EmulatedCopyEngine::reset() {
  for (auto& q : queue_) q.clear();
  fail_text_.clear();
  lag_to_host_ = false;
  times_ = CopyTimes{};
  auto heap = std::make_unique<RefusingHeap>();
  heap_ = heap.get();
  auto pinned = std::make_unique<PinnedWithFallback>(std::move(heap), device_.str() + "'s host pool");
  pinned_ = pinned.get();
  pool_ = std::make_unique<Allocator>(Device::cpu(), std::move(pinned));
}

void EmulatedCopyEngine::refuse_pinned_above(int64_t bytes) { heap_->refuse_above_ = bytes; }

CopyEvent EmulatedCopyEngine::copy(CopyDirection d, const Tensor& src, Tensor& dst, CopyEvent after,
                                   const std::string& what) {
  const bool to_host = d == CopyDirection::ToHost;
  PACKRAT_CHECK(src.nbytes() == dst.nbytes(), "{}: copy of {} bytes into {}", what, src.nbytes(), dst.nbytes());
  PACKRAT_CHECK(src.device() == (to_host ? device_ : Device::cpu()) && dst.device() == (to_host ? Device::cpu() : device_),
                "{}: a copy {} goes from {} to {}, not {} to {}", what, to_host ? "to the host" : "to the device",
                to_host ? device_.str() : "cpu", to_host ? "cpu" : device_.str(), src.device().str(), dst.device().str());
  std::memset(dst.raw(), 0xff, dst.nbytes());  // what a reader that did not wait sees
  const CopyEvent id = next_++;
  queue_[static_cast<int>(d)].push_back({id, d, src, dst, after, what});
  return id;
}

void EmulatedCopyEngine::run(const Op& op) {
  if (!fail_text_.empty() && op.what.find(fail_text_) != std::string::npos)
    fail("{}: copy to the {} on {} failed: an error injected by the test", op.what,
         op.direction == CopyDirection::ToHost ? "host" : "device", device_.str());
  if (op.after) run_through(op.after);
  std::memcpy(const_cast<Tensor&>(op.dst).raw(), op.src.raw(), op.src.nbytes());
  times_.copies += 1;
  (op.direction == CopyDirection::ToHost ? times_.bytes_to_host : times_.bytes_to_device) += op.src.nbytes();
}

void EmulatedCopyEngine::run_through(CopyEvent e) {
  PACKRAT_CHECK(e > 0 && e < next_, "copy engine of {}: no copy has event {}", device_.str(), e);
  for (int d = 0; d < 2; ++d) {
    if (e <= last_done_[d]) continue;
    std::deque<Op>& q = queue_[d];
    bool here = false;
    for (const Op& op : q) here = here || op.id == e;
    if (!here) continue;
    while (!q.empty() && q.front().id <= e) {
      const Op op = q.front();
      q.pop_front();  // a failed copy is gone, as a CUDA stream's would be
      last_done_[d] = op.id;
      run(op);
    }
  }
}

bool EmulatedCopyEngine::done(CopyEvent e) {
  if (lag_to_host_)
    for (const Op& op : queue_[static_cast<int>(CopyDirection::ToHost)])
      if (op.id == e) return false;
  run_through(e);
  return true;
}

void EmulatedCopyEngine::forget(CopyEvent e) {
  PACKRAT_CHECK(e > 0 && e < next_, "copy engine of {}: no copy has event {}", device_.str(), e);
}

CopyTimes EmulatedCopyEngine::take_times() {
  CopyTimes t = times_;
  times_ = CopyTimes{};
  return t;
}

}  // namespace packrat::testing
