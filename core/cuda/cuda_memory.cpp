// The GPU's memory source: cudaMalloc / cudaFree on one device, under the device allocator's
// accounting and block cache (never managed memory: what the report counts is what the GPU holds).
#include "core/cuda/cuda_memory.h"

#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"

namespace packrat::cuda {

namespace {
// Makes `index` the calling thread's current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    cudaGetDevice(&previous_);
    if (previous_ != index) PACKRAT_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

void* DeviceMemory::allocate(size_t bytes) {
  DeviceGuard on(index_);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky out-of-memory status: the allocator empties its cache and retries
    return nullptr;
  }
  return p;
}

void DeviceMemory::release(void* p, size_t) {
  DeviceGuard on(index_);
  cudaFree(p);
}

}  // namespace packrat::cuda
