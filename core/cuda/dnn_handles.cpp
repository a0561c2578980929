// The per-GPU cuDNN and cuBLAS handles (dnn_handles.h).
#include "core/cuda/dnn_handles.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/autocast.h"
#include "core/cuda/cuda_backend.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/dnn_check.h"
#include "core/tensor.h"

namespace packrat::cuda {

namespace {

struct Handles {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  Tensor cublas_workspace;  // (kCublasWorkspaceBytes) u8: cuBLAS's scratch, from packrat's allocator
};

// cuBLAS's recommended workspace on Hopper (32 MiB; 4 MiB suffice before it). Given from the
// allocator under the Workspace tag, so the memory report counts it; otherwise cuBLAS would
// cudaMalloc its own behind the report, as PyTorch also avoids (CUBLAS_WORKSPACE_CONFIG).
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

std::mutex g_mutex;

// GPU `index`'s slot, with that GPU made current (a handle belongs to the device current when it
// is created, and cuDNN / cuBLAS launch on the current device). Call under g_mutex.
Handles& slot(int index) {
  static std::vector<Handles> all(static_cast<size_t>(device_count()));  // never resized: references stay valid
  PACKRAT_CHECK(index >= 0 && static_cast<size_t>(index) < all.size(), "cuda:{}: no such GPU ({} visible)", index,
                all.size());
  make_current(index);
  return all[static_cast<size_t>(index)];
}

}  // namespace

Layout activation_layout() {
  static const Layout layout = [] {
    const char* v = std::getenv("PACKRAT_CUDA_LAYOUT");
    const std::string name = v ? v : "nhwc";
    PACKRAT_CHECK(name == "nhwc" || name == "nchw", "PACKRAT_CUDA_LAYOUT={}: expected nhwc or nchw", name);
    return name == "nchw" ? Layout::Plain : Layout::NHWC;
  }();
  return layout;
}

void make_current(int index) {
  int current = -1;
  PACKRAT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) PACKRAT_CUDA_CHECK(cudaSetDevice(index));
}

cudnnHandle_t cudnn_handle(int index) {
  std::lock_guard lock(g_mutex);
  Handles& h = slot(index);
  if (!h.cudnn) {
    const std::string where = fmt::format("the handle of cuda:{}", index);
    PACKRAT_CUDNN_CHECK(cudnnCreate(&h.cudnn), where);
    PACKRAT_CUDNN_CHECK(cudnnSetStream(h.cudnn, nullptr), where);  // the legacy default stream
  }
  return h.cudnn;
}

cublasHandle_t cublas_handle(int index) {
  std::lock_guard lock(g_mutex);
  Handles& h = slot(index);
  if (!h.cublas) {
    const std::string where = fmt::format("the handle of cuda:{}", index);
    PACKRAT_CUBLAS_CHECK(cublasCreate(&h.cublas), where);
    PACKRAT_CUBLAS_CHECK(cublasSetStream(h.cublas, nullptr), where);
    h.cublas_workspace = Tensor::empty(Shape{kCublasWorkspaceBytes}, DType::u8, Layout::Plain, MemTag::Workspace,
                                       Device::cuda(index));
    PACKRAT_CUBLAS_CHECK(cublasSetWorkspace(h.cublas, h.cublas_workspace.raw(), kCublasWorkspaceBytes), where);
  }
  // No TF32 unless asked (CUBLAS_DEFAULT_MATH keeps f32 GEMMs on f32 FMA): the backend test
  // compares with the CPU at f32 tolerance. Set per call: `precision` may change it.
  PACKRAT_CUBLAS_CHECK(cublasSetMathMode(h.cublas, tf32_use().matmuls ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                       fmt::format("the handle of cuda:{}", index));
  return h.cublas;
}

}  // namespace packrat::cuda
