#pragma once
// The CUDA memory sources (see core/allocator.h): cudaMalloc for GPU `index`, and page-locked
// host memory for a copy engine's host pool (core/cuda/cuda_copy_engine.h).
#include <limits>

#include "core/allocator.h"

namespace packrat::cuda {

class DeviceMemory final : public MemorySource {
 public:
  explicit DeviceMemory(int index) : index_(index) {}
  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  // cudaMalloc synchronises the device and has no bins of its own: cache every block.
  size_t min_cached_bytes() const override { return 0; }
  // No bound: a step's freed blocks serve the next (core/allocator.h).
  int64_t max_cached_bytes() const override { return std::numeric_limits<int64_t>::max(); }

 private:
  int index_;
};

// Page-locked host memory from cudaHostAlloc, nullptr when the system refuses it (the copy
// engine wraps it in a PinnedWithFallback, which then takes the ordinary heap). The caller keeps
// a block alive while a copy from or to it may still run (the copy engine's events say when).
class PinnedHostMemory final : public MemorySource {
 public:
  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  // cudaHostAlloc maps the pages for the GPU, a system call: cache every block.
  size_t min_cached_bytes() const override { return 0; }
};

}  // namespace packrat::cuda
