#pragma once
// The emulated GPU's copy engine (core/copy_engine.h), for tests of the offload layer without a
// GPU. It keeps the two streams as queues and runs a copy only when someone asks about it, in
// its stream's order: done(), host_wait() or compute_wait() on it or a later copy of its stream.
// A destination is filled with 0xff bytes (NaN in f32) when the copy is queued, so a reader that
// skipped its wait reads NaN, not the data: a missing wait fails a bit-for-bit test. Copies whose
// `what` contains a chosen text fail (a copy error to report), and the page-locked pool can be
// made to refuse (the fallback to pageable memory). Copies to the host can be made to lag: done()
// then says no until a wait runs them, as a GPU's copies fall behind a fast forward.
#include <deque>
#include <memory>
#include <string>

#include "core/copy_engine.h"

namespace packrat::testing {

class EmulatedCopyEngine final : public CopyEngine {
 public:
  explicit EmulatedCopyEngine(Device device);
  CopyEvent copy(CopyDirection d, const Tensor& src, Tensor& dst, CopyEvent after, const std::string& what) override;
  bool done(CopyEvent e) override;
  void host_wait(CopyEvent e) override { run_through(e); }
  void compute_wait(CopyEvent e) override { run_through(e); }
  void forget(CopyEvent e) override;
  CopyTimes take_times() override;
  Allocator& host_pool() override { return *pool_; }
  int64_t pageable_bytes() const override { return pinned_->pageable_bytes(); }

  // ---- for tests
  void fail_copies_of(std::string text) { fail_text_ = std::move(text); }  // "": none
  void refuse_pinned_above(int64_t bytes);  // pinned blocks over this many bytes are refused (-1: none)
  void lag_copies_to_host(bool lag) { lag_to_host_ = lag; }  // done() is false until a wait runs them
  int64_t queued() const { return static_cast<int64_t>(queue_[0].size() + queue_[1].size()); }
  void reset();  // the defaults, and an empty pool (between tests)

 private:
  struct Op {
    CopyEvent id;
    CopyDirection direction;
    Tensor src, dst;
    CopyEvent after;
    std::string what;
  };
  void run_through(CopyEvent e);
  void run(const Op& op);

  Device device_;
  std::deque<Op> queue_[2];  // per direction, in order
  CopyEvent next_ = 1;
  CopyEvent last_done_[2] = {0, 0};
  CopyTimes times_;
  std::string fail_text_;
  bool lag_to_host_ = false;
  class RefusingHeap;
  RefusingHeap* heap_ = nullptr;       // owned by pinned_
  PinnedWithFallback* pinned_ = nullptr;  // owned by pool_
  std::unique_ptr<Allocator> pool_;
};

}  // namespace packrat::testing
