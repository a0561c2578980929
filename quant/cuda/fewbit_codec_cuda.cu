// The few-bit codec's CUDA kernels over the bodies of fewbit_device.h (the interval lookup of
// quant/fewbit/fewbit_table.h and the activations of core/pointwise_math.h, shared with the CPU): one
// thread per quad of 4 elements, grid-stride.
#include <type_traits>

#include "core/cuda/launch.cuh"
#include "quant/cuda/launchers.h"
#include "quant/fewbit/fewbit_device.h"

namespace packrat::cuda {

namespace {

template <typename Fn>
void with_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    default: fn(std::integral_constant<int, 4>{}); break;  // checked by the caller: 1..4
  }
}

// Thread t: quad t's codes; the even thread of each pair stores their block of 8. The loop runs
// warp by warp (t0: the warp's first quad) so that both threads of a pair reach the shuffle.
template <class Body>
__global__ void fewbit_encode_kernel(Body body, int64_t quads) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t t0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x - lane; t0 < quads; t0 += stride) {
    const int64_t t = t0 + lane;
    const uint32_t mine = t < quads ? body.codes(t) : 0u;
    const uint32_t next = __shfl_xor_sync(kFullWarp, mine, 1);
    if ((lane & 1) == 0 && t < quads) body.store_pair(t, mine, next);
  }
}

template <class Body>
void launch_encode(const Body& body, int64_t n) {
  const int64_t quads = fewbit_quads(n);
  if (quads > 0) fewbit_encode_kernel<<<blocks_for(quads), kThreadsPerBlock>>>(body, quads);
}

}  // namespace

void launch_fewbit_encode(const FewbitCoder& c, const ActivationId* fn, const void* src, float* y, int64_t n,
                          uint8_t* packed) {
  with_bits(c.bits, [&](auto b) {
    constexpr int B = decltype(b)::value;
    if (!fn) return launch_encode(FewbitEncodeQuads<NoActivation, B>{c, src, y, n, packed}, n);
    with_activation(*fn, [&](auto a) {
      using A = decltype(a);
      launch_encode(FewbitEncodeQuads<A, B>{c, src, y, n, packed}, n);
    });
  });
}

void launch_fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* grad, float* out, int64_t n) {
  with_bits(c.bits, [&](auto b) {
    constexpr int B = decltype(b)::value;
    FewbitDecodeQuads<B> body{c.kind, {}, packed, grad, out, n};
    for (int i = 0; i < (1 << B); ++i) body.levels[i] = c.lut.levels[i];
    launch_for_each(fewbit_quads(n), body);
  });
}

}  // namespace packrat::cuda
