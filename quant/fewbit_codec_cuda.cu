// The few-bit codec's CUDA kernels over the bodies of fewbit_device.h (the interval lookup of
// quant/fewbit_table.h and the activations of core/pointwise_math.h, shared with the CPU).
#include <type_traits>

#include "core/cuda/launch.cuh"
#include "quant/fewbit_device.h"

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

}  // namespace

void launch_fewbit_encode(const FewbitCoder& c, const ActivationId* fn, const void* src, float* y, int64_t n,
                          uint8_t* packed) {
  const int64_t blocks = (n + 7) / 8;
  with_bits(c.bits, [&](auto b) {
    constexpr int B = decltype(b)::value;
    if (!fn) return launch_for_each(blocks, FewbitEncodeBody<NoActivation, B>{c, src, y, n, packed});
    with_activation(*fn, [&](auto a) {
      using A = decltype(a);
      launch_for_each(blocks, FewbitEncodeBody<A, B>{c, src, y, n, packed});
    });
  });
}

void launch_fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* grad, float* out, int64_t n) {
  const int64_t blocks = (n + 7) / 8;
  with_bits(c.bits, [&](auto b) {
    constexpr int B = decltype(b)::value;
    FewbitDecodeBody<B> body{c.kind, {}, packed, grad, out, n};
    for (int i = 0; i < (1 << B); ++i) body.levels[i] = c.lut.levels[i];
    launch_for_each(blocks, body);
  });
}

}  // namespace packrat::cuda
