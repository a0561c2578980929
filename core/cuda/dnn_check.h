#pragma once
// cuDNN and cuBLAS statuses as packrat::Error, naming the call, what it was computing (the
// geometry: `context`, evaluated only on failure), and where. Beside cuda_check.h; .cpp only.
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/error.h"

namespace packrat::cuda {
// cuDNN's own description of its last error on this thread ("" when it has none).
inline std::string cudnn_last_error() {
  char message[1024] = {};
  cudnnGetLastErrorString(message, sizeof message);
  return message;
}
}  // namespace packrat::cuda

#define PACKRAT_CUDNN_CHECK(call, context)                                                              \
  do {                                                                                                  \
    const cudnnStatus_t status_ = (call);                                                               \
    if (status_ != CUDNN_STATUS_SUCCESS)                                                                \
      ::packrat::fail("cuDNN error in {} for {} ({}:{}): {} {}", #call, context, __FILE__, __LINE__,    \
                      cudnnGetErrorString(status_), ::packrat::cuda::cudnn_last_error());               \
  } while (0)

#define PACKRAT_CUBLAS_CHECK(call, context)                                                              \
  do {                                                                                                   \
    const cublasStatus_t status_ = (call);                                                               \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                                                \
      ::packrat::fail("cuBLAS error in {} for {} ({}:{}): {}", #call, context, __FILE__, __LINE__,       \
                      cublasGetStatusString(status_));                                                   \
  } while (0)
