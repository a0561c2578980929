// The memory section's kernels: fill, dtype conversion, plain <-> nChw16c / nChw8c and plain <-> NHWC
// reorders.
#include <cstdint>
#include <type_traits>

#include "core/cuda/kernels/shape.h"  // ThinTranspose
#include "core/cuda/memory_kernels.h"
#include "core/typed_dispatch.h"

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
  if (i < n) d[i] = cast_element<D>(s[i]);
}

// One thread per element: its plain and blocked (B channels a block) offsets, bytes copied one by one.
__global__ void reorder_kernel(const char* src, char* dst, int64_t N, int64_t C, int64_t HW, int64_t B, int es,
                               bool to_blocked) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * C * HW) return;
  const int64_t s = i % HW, c = (i / HW) % C, n = i / (HW * C);
  const int64_t plain = i, blocked = ((n * (C / B) + c / B) * HW + s) * B + c % B;
  const int64_t from = to_blocked ? plain : blocked, to = to_blocked ? blocked : plain;
  for (int b = 0; b < es; ++b) dst[to * es + b] = src[from * es + b];
}

// out[n][s][r] = in[n][r][s] for R x S matrices, through a 32 x 32 shared tile so that both the
// reads and the writes of a warp are consecutive. Block (32, 8); grid (S tiles, R tiles, samples).
template <typename T>
__global__ void transpose_kernel(const T* in, T* out, int64_t N, int64_t R, int64_t S) {
  __shared__ T tile[32][33];  // +1: no bank conflicts on the transposed read
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32, s0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const T* src = in + n * R * S;  // (R, S)
    T* dst = out + n * R * S;       // (S, R)
    for (int k = threadIdx.y; k < 32; k += 8) {
      const int64_t r = r0 + k, s = s0 + threadIdx.x;
      if (r < R && s < S) tile[k][threadIdx.x] = src[r * S + s];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
      const int64_t s = s0 + k, r = r0 + threadIdx.x;
      if (r < R && s < S) dst[s * R + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void thin_transpose_kernel(ThinTranspose<T> body, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) body(i);
}

template <typename T>
void launch_transpose(const void* src, void* dst, int64_t N, int64_t R, int64_t S) {
  if (R <= kThinSide || S <= kThinSide) {
    const int64_t n = thin_transpose_indices(N, R, S);
    thin_transpose_kernel<T><<<blocks_for(n), kThreads>>>(
        ThinTranspose<T>{static_cast<const T*>(src), static_cast<T*>(dst), R, S}, n);
    return;
  }
  const dim3 block(32, 8);
  const dim3 grid(static_cast<unsigned>((S + 31) / 32), static_cast<unsigned>((R + 31) / 32),
                  static_cast<unsigned>(N < 65535 ? N : 65535));
  transpose_kernel<T><<<grid, block>>>(static_cast<const T*>(src), static_cast<T*>(dst), N, R, S);
}

}  // namespace

void launch_fill(void* p, DType dtype, int64_t n, double value) {
  with_typed(p, dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    fill_kernel<<<blocks_for(n), kThreads>>>(t, n, cast_element<T>(value));
  });
}

void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  with_typed(const_cast<void*>(src), src_dtype, [&](auto* s) {
    with_typed(dst, dst_dtype, [&](auto* d) { convert_kernel<<<blocks_for(n), kThreads>>>(s, d, n); });
  });
}

void launch_reorder_blocked(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, int64_t block,
                            int element_size, bool to_blocked) {
  reorder_kernel<<<blocks_for(N * C * HW), kThreads>>>(static_cast<const char*>(src), static_cast<char*>(dst), N, C,
                                                       HW, block, element_size, to_blocked);
}

void launch_reorder_nhwc(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, int element_size, bool to_nhwc) {
  const int64_t R = to_nhwc ? C : HW, S = to_nhwc ? HW : C;  // per sample: (R, S) -> (S, R)
  switch (element_size) {
    case 1: launch_transpose<uint8_t>(src, dst, N, R, S); break;
    case 2: launch_transpose<uint16_t>(src, dst, N, R, S); break;
    case 4: launch_transpose<uint32_t>(src, dst, N, R, S); break;
    default: launch_transpose<uint64_t>(src, dst, N, R, S); break;
  }
}

}  // namespace packrat::cuda
