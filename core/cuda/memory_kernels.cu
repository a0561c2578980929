// The memory section's kernels: fill, dtype conversion, plain <-> nChw16c reorder.
#include <cstdint>
#include <type_traits>

#include "core/cuda/memory_kernels.h"
#include "core/cuda/typed_dispatch.h"

namespace packrat::cuda {

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = v;
}

template <typename S, typename D>
__global__ void convert_kernel(const S* s, D* d, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) d[i] = static_cast<D>(s[i]);
}

// One thread per element: its plain and blocked offsets, bytes copied one by one.
__global__ void reorder_kernel(const char* src, char* dst, int64_t N, int64_t C, int64_t HW, int es, bool to_blocked) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * C * HW) return;
  const int64_t s = i % HW, c = (i / HW) % C, n = i / (HW * C);
  const int64_t plain = i, blocked = ((n * (C / 16) + c / 16) * HW + s) * 16 + c % 16;
  const int64_t from = to_blocked ? plain : blocked, to = to_blocked ? blocked : plain;
  for (int b = 0; b < es; ++b) dst[to * es + b] = src[from * es + b];
}

}  // namespace

void launch_fill(void* p, DType dtype, int64_t n, double value) {
  with_typed(p, dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    fill_kernel<<<blocks_for(n), kThreads>>>(t, n, static_cast<T>(value));
  });
}

void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  with_typed(const_cast<void*>(src), src_dtype, [&](auto* s) {
    with_typed(dst, dst_dtype, [&](auto* d) { convert_kernel<<<blocks_for(n), kThreads>>>(s, d, n); });
  });
}

void launch_reorder_nchw16c(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, int element_size,
                            bool to_blocked) {
  reorder_kernel<<<blocks_for(N * C * HW), kThreads>>>(static_cast<const char*>(src), static_cast<char*>(dst), N, C,
                                                       HW, element_size, to_blocked);
}

}  // namespace packrat::cuda
