#pragma once
// The fp8 codec's entry points (COAT's activation format; the arithmetic: quant/fp8/fp8_math.h).
// A saved f32 buffer of n elements is kept as n one-byte codes and its scales, one f32 per group of
// G consecutive elements of the buffer as it lies (per_group) or one for the tensor (per_tensor):
//   codes:  (n,) u8, element i's code at byte i
//   scales: (groups,) f32, groups = ceil(n / G) (per_group) or 1 (per_tensor; 0 for n = 0)
// The Tensor entry points check what every device shares and dispatch to the device's codec table
// (quant/codec/codec_kernels.h): the CPU's kernels (quant/cpu/fp8_codec_cpu.cpp) or CUDA's
// (quant/cuda/fp8_codec_cuda.cu), which run the same bodies and write the same bytes.
#include <cstdint>
#include <string_view>

#include "quant/fp8/fp8_math.h"

namespace packrat {

class Tensor;

struct Fp8Config {
  Fp8Format format = Fp8Format::E4M3;
  Fp8Scale scale = Fp8Scale::PerGroup;
  int64_t group_size = 128;  // per_group only
};

std::string_view fp8_format_name(Fp8Format f);
std::string_view fp8_scale_name(Fp8Scale s);

// The groups of an n-element buffer: groups of c.group_size, or one of n for per_tensor.
Fp8Geometry fp8_geometry(int64_t numel, const Fp8Config& c);

// codes (n,) u8 and scales (groups,) f32 of x (f32, n elements, any layout: taken as it lies), on
// x's device.
void fp8_encode(const Tensor& x, const Fp8Config& c, const Tensor& codes, const Tensor& scales);
// out (f32, n elements, the layout encoded) from codes and scales, on their device.
void fp8_decode(const Tensor& codes, const Tensor& scales, const Fp8Config& c, const Tensor& out);

// The CPU kernels on host pointers (quant/cpu/fp8_codec_cpu.cpp): per_group, OpenMP over groups,
// each group's amax then its codes while it is in cache; per_tensor, the amax reduced over chunks,
// then the codes.
void fp8_encode_host(const float* x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, uint8_t* codes, float* scales);
void fp8_decode_host(const uint8_t* codes, const float* scales, Fp8Format f, const Fp8Geometry& g, float* out);

}  // namespace packrat
