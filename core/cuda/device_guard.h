#pragma once
// DeviceGuard: makes one GPU the calling thread's current device for a scope (the memory sources
// and the copy engine run on the thread of whoever calls them, whose current device may differ).
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"

namespace packrat::cuda {

// Makes `index` the calling thread's current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    cudaGetDevice(&previous_);
    if (previous_ != index) PACKRAT_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace packrat::cuda
