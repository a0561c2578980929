#pragma once
// One cuDNN and one cuBLAS handle per GPU, created on first use and never destroyed (like the
// backends that use them). Both run on the legacy default stream, as every packrat kernel does,
// so their work is ordered with ours without events. A handle is not thread-safe: packrat's
// primitives run on the thread that runs the model. Included by core/cuda/*.cpp only.
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/dtype.h"

namespace packrat::cuda {

// Makes GPU `index` the calling thread's current device (where kernels launch and cuDNN and
// cuBLAS run); every primitive of this section calls it first.
void make_current(int index);

// The handle of GPU `index`, with that GPU made the calling thread's current device.
cudnnHandle_t cudnn_handle(int index);
// cuBLAS with CUBLAS_DEFAULT_MATH: f32 GEMMs stay f32 (no TF32 tensor cores), unless
// tf32_use().matmuls (core/autocast.h: `precision`, or PACKRAT_CUDA_TF32=1).
cublasHandle_t cublas_handle(int index);

// The layout of the activations this backend's convolutions read and write (read once):
// NHWC, channels innermost, which cuDNN's fastest convolutions read without transposing, unless
// PACKRAT_CUDA_LAYOUT=nchw in the environment (plain NCHW, for comparisons).
Layout activation_layout();

}  // namespace packrat::cuda
