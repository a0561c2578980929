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

// After a kernel launch from a .cu launcher: a launch error (bad configuration, no kernel image
// for this GPU) as packrat::Error naming the primitive.
#define PACKRAT_CHECK_LAUNCH(primitive)                                                            \
  do {                                                                                              \
    const cudaError_t status_ = cudaGetLastError();                                                 \
    if (status_ != cudaSuccess)                                                                     \
      ::packrat::fail("CUDA kernel of {} failed to launch: {}", primitive, cudaGetErrorString(status_)); \
  } while (0)
