// Current device, device synchronisation, and page-locked host memory for asynchronous copies.
#include "core/cuda/host_runtime.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"

namespace packrat::cuda {

namespace {

// Page-locked host blocks. cudaMemcpyAsync from such a block returns before the copy has run, so
// a freed block must not be written again until the GPU has passed every copy queued from it:
// release() records an event on the legacy default stream (where every packrat copy and kernel
// runs), and allocate() reuses a block only once its event has completed (PyTorch's
// CachingHostAllocator does the same with per-stream events). cudaHostAlloc is slow (it maps
// the pages for the GPU), so blocks are kept for reuse, never given back before exit.
class PinnedHostMemory final : public MemorySource {
 public:
  void* allocate(size_t bytes) override {
    {
      std::lock_guard lock(mutex_);
      for (size_t i = 0; i < free_.size(); ++i) {
        Block& b = free_[i];
        if (b.bytes < bytes || b.bytes > bytes + bytes / 8) continue;
        const cudaError_t s = b.done ? cudaEventQuery(b.done) : cudaSuccess;
        if (s == cudaErrorNotReady) {
          cudaGetLastError();  // not an error: the copy is still queued; leave no status behind
          continue;
        }
        void* p = b.p;
        if (b.done) cudaEventDestroy(b.done);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return p;
      }
    }
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;  // the allocator reports OutOfMemory naming the tag and layer
    }
    return p;
  }

  // Called from Allocation's destructor: must not throw. Without an event (creating or recording
  // one failed) it waits for the GPU instead, so the block is free at once.
  void release(void* p, size_t bytes) override {
    cudaEvent_t done = nullptr;
    if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(done, 0) != cudaSuccess) {
      if (done) cudaEventDestroy(done);
      done = nullptr;
      cudaGetLastError();
      cudaDeviceSynchronize();
    }
    std::lock_guard lock(mutex_);
    free_.push_back({p, bytes, done});
  }

  // The allocator's own cache would hand a block back at once; this source keeps them instead.
  size_t min_cached_bytes() const override { return std::numeric_limits<size_t>::max(); }

 private:
  struct Block {
    void* p;
    size_t bytes;
    cudaEvent_t done;  // recorded when the block was freed (nullptr: free now)
  };
  std::mutex mutex_;
  std::vector<Block> free_;
};

}  // namespace

void set_current_device(int index) { PACKRAT_CUDA_CHECK(cudaSetDevice(index)); }

void synchronize_device(int index) {
  int previous = 0;
  PACKRAT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != index) PACKRAT_CUDA_CHECK(cudaSetDevice(index));
  const cudaError_t s = cudaDeviceSynchronize();
  if (previous != index) cudaSetDevice(previous);
  if (s != cudaSuccess)  // an asynchronous kernel error surfaces here
    fail("cuda:{}: a kernel or copy queued on the GPU failed: {}", index, cudaGetErrorString(s));
}

void profiler_start() { cudaProfilerStart(); }
void profiler_stop() { cudaProfilerStop(); }

Allocator& pinned_host_allocator() {
  // Never destroyed, like the device allocators: tensors held by statics may outlive it.
  static Allocator* instance = new Allocator(Device::cpu(), std::make_unique<PinnedHostMemory>());
  return *instance;
}

}  // namespace packrat::cuda
