#pragma once
// CUDA runtime errors as packrat::Error, naming the call and where it was made.
#include <cuda_runtime.h>

#include "core/error.h"

#define PACKRAT_CUDA_CHECK(call)                                                                    \
  do {                                                                                              \
    const cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess)                                                                     \
      ::packrat::fail("CUDA error in {} ({}:{}): {}", #call, __FILE__, __LINE__, cudaGetErrorString(status_)); \
  } while (0)
