#pragma once
// The CUDA backend's entry points for core/backend.cpp. CUDA-free on purpose: this header is
// included by code compiled without nvcc; only core/cuda/*.cu and *.cpp see CUDA headers.
#include "core/backend.h"

namespace packrat::cuda {

// GPUs visible to this process (0 when the driver or the device is missing; never throws).
int device_count();
// The backend of GPU `index`; throws packrat::Error naming the device when it is not visible.
Backend& cuda_backend(int index);

}  // namespace packrat::cuda
