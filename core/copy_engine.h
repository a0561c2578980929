#pragma once
// A device's copy engine: copies between its memory and page-locked host memory on two side
// streams (one each way), ordered by events, so that they run while the compute stream's kernels
// do. The offload layer (autograd/offload/) moves saved tensors with it: out to the host in the
// forward, back in the backward, a few nodes ahead of the node that needs them.
//
// Ordering, as a GPU runs it:
//   copy()          the copy starts after every kernel the compute stream has queued so far (the
//                   kernel that wrote src; the last use of a block dst reuses) and after `after`
//                   (an event of the other direction: a payload comes back only once it is out).
//   compute_wait()  kernels the compute stream queues from now on start after the copy; the host
//                   does not wait.
//   host_wait()     the host waits for the copy.
//   done()          whether it has finished, without waiting.
// The caller keeps src and dst alive until it has seen the copy done (done() true, host_wait) or
// made the compute stream wait for it (compute_wait): the allocators know nothing of streams, and
// would hand a block a copy still reads or writes to the next request.
// A failed copy (a CUDA error on a copy stream) throws from done / host_wait / compute_wait, naming
// the `what` given to copy() (the tensor and its layer), not from some later kernel.
//
// The CPU has no second memory to move to: its backend has no copy engine (Backend::copy_engine()
// is null), and a config that offloads on the CPU is an error naming the key.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/allocator.h"
#include "core/tensor.h"

namespace packrat {

using CopyEvent = uint64_t;  // 0: no event

enum class CopyDirection : uint8_t { ToHost, ToDevice };

struct CopyTimes {
  int64_t copies = 0;        // completed copies each way, since the last take_times()
  int64_t bytes_to_host = 0, bytes_to_device = 0;
  double busy_s = 0;         // time the two streams spent copying (GPU events; 0 where unmeasured)
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Queues dst <- src, the same number of bytes (nbytes()), one tensor in host memory and the
  // other on this engine's device, on the direction's stream. Returns the copy's event.
  virtual CopyEvent copy(CopyDirection d, const Tensor& src, Tensor& dst, CopyEvent after, const std::string& what) = 0;
  virtual bool done(CopyEvent e) = 0;
  virtual void host_wait(CopyEvent e) = 0;
  virtual void compute_wait(CopyEvent e) = 0;
  // The event is no longer asked about (its resources go back to a pool); the copy itself may
  // still be running.
  virtual void forget(CopyEvent e) = 0;
  // What the streams did since the last call (each copy's time is counted once it is done).
  virtual CopyTimes take_times() = 0;
  // The pool of page-locked host memory the copies use: an allocator with the same tags, layer
  // scopes, peaks and block cache as a device's (its tensors are CPU tensors), so that a step
  // reuses the blocks of the last one and the memory report reads it like any other. Where
  // page-locked memory runs out, blocks come from the ordinary heap, with one warning naming
  // the bytes (the copies then run slower, and the report counts them: pageable_bytes()).
  virtual Allocator& host_pool() = 0;
  virtual int64_t pageable_bytes() const = 0;  // bytes of host_pool() blocks that are not page-locked
};

// A MemorySource of page-locked memory that falls back to the ordinary heap when the pinned
// source refuses, warning once per refusal with the bytes (core/copy_engine.cpp).
class PinnedWithFallback final : public MemorySource {
 public:
  explicit PinnedWithFallback(std::unique_ptr<MemorySource> pinned, std::string what);
  ~PinnedWithFallback() override;
  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  size_t min_cached_bytes() const override { return 0; }  // pinning costs a system call: cache every block
  int64_t pageable_bytes() const;

 private:
  std::unique_ptr<MemorySource> pinned_;
  std::string what_;  // "cuda:0's host pool"
  mutable std::mutex mutex_;
  std::map<void*, size_t> pageable_;  // blocks from the heap, and their sizes
  int64_t pageable_bytes_ = 0;
};

}  // namespace packrat
