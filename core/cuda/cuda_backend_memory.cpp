// CudaBackend: copy (host <-> device, device <-> device), fill, reorder, dtype conversion.
#include <cuda_runtime.h>

#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/memory_kernels.h"

namespace packrat::cuda {

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  PACKRAT_CHECK(src.nbytes() == dst.nbytes() && src.layout() == dst.layout(), "copy: {} into {}", src.describe(),
                dst.describe());
  // Unified addressing: the runtime knows which side each pointer is on. A copy to the host is
  // synchronous, so host code may read dst right after. A copy to the device is queued on the
  // default stream and the host goes on: from pageable memory the runtime has staged the bytes
  // before it returns; from page-locked memory (batches, core/device_runtime.h) the copy runs
  // later, and that allocator reuses the block only once the GPU has passed it.
  if (dst.is_cpu())
    PACKRAT_CUDA_CHECK(cudaMemcpy(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault));
  else
    PACKRAT_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, 0));
}

void CudaBackend::copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) {
  check_copy_range(src, src_offset, dst, dst_offset, count);
  if (count == 0) return;
  const size_t es = dtype_size(src.dtype());
  // Device to device on the default stream: ordered with the kernels around it, no host wait.
  PACKRAT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.raw()) + dst_offset * es,
                                     static_cast<const char*>(src.raw()) + src_offset * es, static_cast<size_t>(count) * es,
                                     cudaMemcpyDeviceToDevice, cudaStreamLegacy));
}

void CudaBackend::fill(Tensor& t, double value) {
  if (t.numel() == 0) return;
  if (value == 0.0) {
    PACKRAT_CUDA_CHECK(cudaMemset(t.raw(), 0, t.nbytes()));
    return;
  }
  launch_fill(t.raw(), t.dtype(), t.numel(), value);
  PACKRAT_CUDA_CHECK(cudaGetLastError());
}

Tensor CudaBackend::to_layout(const Tensor& t, Layout layout) {
  if (t.layout() == layout) return t;
  // Between two non-plain layouts (nChw16c or nChw8c from the CPU <-> NHWC) through plain.
  if (t.layout() != Layout::Plain && layout != Layout::Plain) return to_layout(to_layout(t, Layout::Plain), layout);
  const Layout other = layout == Layout::Plain ? t.layout() : layout;  // the non-plain side
  PACKRAT_CHECK(t.rank() == 4 && (other == Layout::NHWC || t.dim(1) % channel_block(other) == 0),
                "to_layout: {} cannot be laid out as {}", t.describe(), layout_name(layout));
  Tensor out = Tensor::empty(t.shape(), t.dtype(), layout, TagScope::current(), t.device());
  if (t.numel() > 0) {
    const int es = static_cast<int>(dtype_size(t.dtype()));
    if (other == Layout::NHWC)
      launch_reorder_nhwc(t.raw(), out.raw(), t.dim(0), t.dim(1), t.dim(2) * t.dim(3), es, layout == Layout::NHWC);
    else
      launch_reorder_blocked(t.raw(), out.raw(), t.dim(0), t.dim(1), t.dim(2) * t.dim(3), channel_block(other), es,
                             layout == other);
    PACKRAT_CUDA_CHECK(cudaGetLastError());
  }
  return out;
}

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  PACKRAT_CHECK(src.numel() == dst.numel() && src.layout() == dst.layout(), "convert: {} into {}", src.describe(),
                dst.describe());
  if (src.numel() == 0) return;
  launch_convert(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel());
  PACKRAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace packrat::cuda
