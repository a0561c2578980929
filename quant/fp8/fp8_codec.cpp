#include "quant/fp8/fp8_codec.h"

#include "core/error.h"
#include "core/tensor.h"
#include "quant/codec/codec_kernels.h"

namespace packrat {

std::string_view fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }
std::string_view fp8_scale_name(Fp8Scale s) { return s == Fp8Scale::PerTensor ? "per_tensor" : "per_group"; }

Fp8Geometry fp8_geometry(int64_t numel, const Fp8Config& c) {
  PACKRAT_CHECK(c.group_size >= 1, "fp8 codec: group_size must be at least 1, got {}", c.group_size);
  Fp8Geometry g;
  g.numel = numel;
  g.group_size = c.scale == Fp8Scale::PerTensor ? (numel > 0 ? numel : 1) : c.group_size;
  return g;
}

namespace {

void check_buffers(const Tensor& values, const Tensor& codes, const Tensor& scales, const Fp8Geometry& g,
                   const char* where) {
  PACKRAT_CHECK(values.dtype() == DType::f32, "{}: the values must be f32, got {}", where, values.describe());
  PACKRAT_CHECK(codes.dtype() == DType::u8 && scales.dtype() == DType::f32, "{}: codes {} must be u8, scales {} f32",
                where, codes.describe(), scales.describe());
  PACKRAT_CHECK(codes.numel() == g.numel && scales.numel() == g.groups(),
                "{}: {} values, {} codes and {} scales given; {} groups of {} need {} and {}", where, values.numel(),
                codes.numel(), scales.numel(), g.groups(), g.group_size, g.numel, g.groups());
  PACKRAT_CHECK(codes.device() == values.device() && scales.device() == values.device(),
                "{}: values on {}, codes on {}, scales on {}", where, values.device().str(), codes.device().str(),
                scales.device().str());
}

}  // namespace

void fp8_encode(const Tensor& x, const Fp8Config& c, const Tensor& codes, const Tensor& scales) {
  const Fp8Geometry g = fp8_geometry(x.numel(), c);
  check_buffers(x, codes, scales, g, "fp8_encode");
  if (g.numel == 0) return;
  codecs(x.device(), "fp8_encode: the input").fp8_encode(x, c.format, c.scale, g, codes, scales);
}

void fp8_decode(const Tensor& codes, const Tensor& scales, const Fp8Config& c, const Tensor& out) {
  const Fp8Geometry g = fp8_geometry(out.numel(), c);
  check_buffers(out, codes, scales, g, "fp8_decode");
  if (g.numel == 0) return;
  codecs(out.device(), "fp8_decode: the codes").fp8_decode(codes, scales, c.format, g, out);
}

}  // namespace packrat
