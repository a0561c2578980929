#pragma once
// The CUDA copy engine (core/copy_engine.h) of one GPU: two non-blocking streams, one for copies
// to the host and one for copies to the device, beside the compute stream (the legacy default
// stream, where every packrat kernel runs), and cudaEvents that order the three.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/copy_engine.h"

namespace packrat::cuda {

// Copies between GPU `index`'s memory and host memory on side streams, so that they overlap the
// kernels on the compute stream; each copy is named by a CopyEvent for the offload layer to wait
// on. Thread safe (one mutex around the event tables); made by CudaBackend::copy_engine().
class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(int index);
  ~CudaCopyEngine() override;  // waits for both streams; never throws
  CudaCopyEngine(const CudaCopyEngine&) = delete;
  CudaCopyEngine& operator=(const CudaCopyEngine&) = delete;

  CopyEvent copy(CopyDirection d, const Tensor& src, Tensor& dst, CopyEvent after, const std::string& what) override;
  bool done(CopyEvent e) override;
  void host_wait(CopyEvent e) override;
  void compute_wait(CopyEvent e) override;
  void forget(CopyEvent e) override;
  CopyTimes take_times() override;
  Allocator& host_pool() override { return *host_pool_; }
  int64_t pageable_bytes() const override { return pinned_->pageable_bytes(); }

 private:
  // One queued copy: its events (timing ones, from the pool) and what take_times() and the
  // error messages need.
  struct Copy {
    cudaEvent_t start = nullptr, end = nullptr;
    CopyDirection direction = CopyDirection::ToHost;
    int64_t bytes = 0;
    std::string what;
    bool counted = false;  // complete, and added to times_
  };

  cudaStream_t stream(CopyDirection d) const { return d == CopyDirection::ToHost ? to_host_ : to_device_; }
  // The live copy named by e; throws naming `call` and e when it is 0, unknown or forgotten.
  Copy& find(CopyEvent e, const char* call);
  // Whether c has completed; on completion, counts it into times_ (once). Throws on a CUDA error.
  bool settle(Copy& c);
  // Gives the events of forgotten copies that have completed back to the pool.
  void recycle_retiring();
  cudaError_t take_event(cudaEvent_t* e);  // from the pool, else a new one
  // "<what>: copy to the host on cuda:N failed: <error>" as packrat::Error.
  [[noreturn]] void fail_copy(const std::string& what, CopyDirection d, cudaError_t status) const;

  int index_;
  cudaStream_t to_host_ = nullptr, to_device_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;   // recorded on the compute stream, waited on by a copy stream
  PinnedWithFallback* pinned_ = nullptr;  // owned by host_pool_
  std::unique_ptr<Allocator> host_pool_;

  std::mutex mutex_;  // guards everything below
  CopyEvent next_id_ = 1;
  std::unordered_map<CopyEvent, Copy> live_;
  std::vector<Copy> retiring_;            // forgotten before they completed: events not reusable yet
  std::vector<cudaEvent_t> free_events_;  // the pool
  CopyTimes times_;                       // completed copies not yet taken
};

}  // namespace packrat::cuda
