#include "core/device_runtime.h"

#include "core/build_config.h"
#if PACKRAT_HAVE_CUDA
#include "core/cuda/cuda_backend.h"
#include "core/cuda/host_runtime.h"
#endif

namespace packrat {

namespace {
// A GPU this process really has (an emulated one has an index beyond the visible GPUs).
[[maybe_unused]] bool real_gpu(Device d) {
#if PACKRAT_HAVE_CUDA
  return !d.is_cpu() && d.index < cuda::device_count();
#else
  return false;
#endif
}
}  // namespace

void make_current(Device d) {
#if PACKRAT_HAVE_CUDA
  if (real_gpu(d)) cuda::set_current_device(d.index);
#endif
}

void synchronize(Device d) {
#if PACKRAT_HAVE_CUDA
  if (real_gpu(d)) cuda::synchronize_device(d.index);
#endif
}

void profiled_range_begin(Device d) {
#if PACKRAT_HAVE_CUDA
  if (real_gpu(d)) cuda::profiler_start();
#endif
}

void profiled_range_end(Device d) {
#if PACKRAT_HAVE_CUDA
  if (real_gpu(d)) cuda::profiler_stop();
#endif
}

Tensor empty_host(const Shape& shape, DType dtype, MemTag tag, Allocator* host_memory) {
  Tensor t = Tensor::empty(shape, dtype, Layout::Plain, tag, Device::cpu());
  // The same bytes from the other host allocator; the CPU's block goes back to its cache at once.
  if (host_memory != nullptr) t.storage()->allocation = host_memory->allocate(t.nbytes(), tag);
  return t;
}

Allocator* pinned_host_allocator(Device d) {
#if PACKRAT_HAVE_CUDA
  if (real_gpu(d)) return &cuda::pinned_host_allocator();
#endif
  return nullptr;
}

}  // namespace packrat
