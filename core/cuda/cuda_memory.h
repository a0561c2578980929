#pragma once
// cudaMalloc-backed MemorySource for GPU `index` (see core/allocator.h).
#include "core/allocator.h"

namespace packrat::cuda {

class DeviceMemory final : public MemorySource {
 public:
  explicit DeviceMemory(int index) : index_(index) {}
  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  // cudaMalloc synchronises the device and has no bins of its own: cache every block.
  size_t min_cached_bytes() const override { return 0; }

 private:
  int index_;
};

}  // namespace packrat::cuda
