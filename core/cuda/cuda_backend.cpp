// The CUDA backends, one per visible GPU, created on first use.
#include "core/cuda/cuda_backend.h"

#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_copy_engine.h"
#include "core/cuda/cuda_memory.h"

namespace packrat::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

CudaBackend::CudaBackend(int index)
    : index_(index), allocator_(std::make_unique<Allocator>(Device::cuda(index), std::make_unique<DeviceMemory>(index))) {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, index);
  name_ = fmt::format("cuda:{} ({})", index, prop.name);
}

CopyEngine* CudaBackend::copy_engine() {
  // Only a run that offloads makes one: its streams and host pool cost nothing otherwise.
  std::call_once(copy_engine_once_, [this] { copy_engine_ = std::make_unique<CudaCopyEngine>(index_); });
  return copy_engine_.get();
}

Backend& cuda_backend(int index) {
  const int n = device_count();
  if (n == 0) fail("device cuda:{}: no GPU is visible to this process (check the driver and CUDA_VISIBLE_DEVICES)", index);
  if (index < 0 || index >= n) fail("device cuda:{}: only {} GPU{} visible", index, n, n == 1 ? " is" : "s are");
  static std::mutex mutex;
  static std::vector<CudaBackend*> backends(static_cast<size_t>(n), nullptr);  // never destroyed, like the CPU's
  std::lock_guard lock(mutex);
  auto& b = backends[static_cast<size_t>(index)];
  if (!b) b = new CudaBackend(index);
  return *b;
}

}  // namespace packrat::cuda
