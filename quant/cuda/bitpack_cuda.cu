// The CUDA kernels of exact packing (masks and indices) over the bodies of bitpack_device.h.
#include <cuda_runtime.h>

#include "core/cuda/launch.cuh"
#include "quant/cuda/launchers.h"
#include "quant/bits/bitpack_device.h"

namespace packrat::cuda {

namespace {

// The first unfit element: atomicMin over the indices noted (the flag starts at all ones).
struct DeviceFirstUnfit {
  unsigned long long* first;
  PACKRAT_HD void note(int64_t i) const {
#if defined(__CUDA_ARCH__)
    atomicMin(first, static_cast<unsigned long long>(i));
#else
    (void)i;
#endif
  }
};

template <typename Fn>
void with_element(int elem, Fn&& fn) {
  switch (elem) {
    case 1: fn(uint8_t{}); break;
    case 4: fn(int32_t{}); break;
    default: fn(int64_t{}); break;  // checked by the caller: 1, 4 or 8
  }
}

}  // namespace

void launch_pack_codes(const void* src, int elem, int64_t n, int bits, uint8_t* dst, int64_t* first_unfit) {
  cudaMemsetAsync(first_unfit, 0xFF, sizeof(int64_t));  // an error here is reported by the caller's launch check
  if (n == 0) return;
  auto* first = reinterpret_cast<unsigned long long*>(first_unfit);
  with_element(elem, [&](auto t) {
    using T = decltype(t);
    launch_for_each((n + 7) / 8, PackCodesBody<T, DeviceFirstUnfit>{static_cast<const T*>(src), n, bits, dst,
                                                                   DeviceFirstUnfit{first}});
  });
}

void launch_unpack_codes(const uint8_t* src, int64_t n, int bits, void* out, int elem) {
  if (n == 0) return;
  with_element(elem, [&](auto t) {
    using T = decltype(t);
    launch_for_each((n + 7) / 8, UnpackCodesBody<T>{src, n, bits, static_cast<T*>(out)});
  });
}

}  // namespace packrat::cuda
