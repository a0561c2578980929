#pragma once
// The CUDA side of core/device_runtime.h. CUDA-free header (g++ callers).
#include "core/allocator.h"

namespace packrat::cuda {

void set_current_device(int index);
void synchronize_device(int index);
// cudaProfilerStart / cudaProfilerStop (errors ignored: profiling marks never stop a run).
void profiler_start();
void profiler_stop();
// One process-wide allocator of page-locked host memory (cudaHostAllocPortable: usable with
// every GPU), device cpu, its own tags and peaks.
Allocator& pinned_host_allocator();

}  // namespace packrat::cuda
