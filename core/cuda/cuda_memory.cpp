// The GPU's memory source: cudaMalloc / cudaFree on one device, under the device allocator's
// accounting and block cache (never managed memory: what the report counts is what the GPU holds).
// And page-locked host memory for a copy engine's host pool.
#include "core/cuda/cuda_memory.h"

#include <cuda_runtime.h>

#include "core/cuda/device_guard.h"

namespace packrat::cuda {

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

void* PinnedHostMemory::allocate(size_t bytes) {
  void* p = nullptr;
  // Portable: page-locked for every GPU's context, not only the caller's current device (the
  // pool is allocated from on whatever thread runs the offload layer).
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();  // clear the status: PinnedWithFallback takes the heap instead
    return nullptr;
  }
  return p;
}

void PinnedHostMemory::release(void* p, size_t) {
  if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();  // from a destructor: never throws
}

}  // namespace packrat::cuda
