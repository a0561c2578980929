#pragma once
// What a training run needs from a GPU besides the primitive table (core/backend.h): making it
// the calling thread's current device (kernels launch there), waiting for the work queued on it
// (benchmarks read the clock after this), and page-locked host memory that batches are copied
// from asynchronously. CUDA-free: the CUDA side is core/cuda/host_runtime.cpp. For the CPU, and
// for a device no real GPU backs (tests' emulated GPU), each is a no-op.
#include "core/allocator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace packrat {

// cudaSetDevice(d.index) for this thread.
void make_current(Device d);
// Returns once every kernel and copy queued on d has finished (cudaDeviceSynchronize).
void synchronize(Device d);
// Marks the work a profiler should record (cudaProfilerStart / Stop): `ncu --profile-from-start
// off` and `nsys --capture-range=cudaProfilerApi` then see the timed steps, not the set-up and
// warm-up before them (scripts/device_check.sh). Without a profiler, or off a real GPU, nothing.
void profiled_range_begin(Device d);
void profiled_range_end(Device d);
// Page-locked (cudaHostAlloc) host memory for tensors copied to d, accounted like any allocator
// (a CPU allocator of its own); nullptr when d is the CPU or no real GPU. A block freed while a
// copy from it may still be queued is reused only once the GPU has passed that point.
Allocator* pinned_host_allocator(Device d);
// A plain host tensor, its bytes from `host_memory` (nullptr: the CPU allocator).
Tensor empty_host(const Shape& shape, DType dtype, MemTag tag, Allocator* host_memory);

}  // namespace packrat
