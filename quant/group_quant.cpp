#include "quant/group_quant.h"

#include "core/error.h"
#include "core/tensor.h"
#include "quant/codec_device.h"

namespace packrat {

std::string_view grouping_name(Grouping g) { return g == Grouping::PerSample ? "per_sample" : "flat"; }
std::string_view meta_name(MetaType m) { return m == MetaType::BF16 ? "bf16" : "f32"; }
std::string_view rounding_name(Rounding r) { return r == Rounding::Stochastic ? "stochastic" : "nearest"; }

void GroupQuantConfig::check(std::string_view where) const {
  PACKRAT_CHECK(group_bits_supported(bits), "{}: per-group quantization supports 1, 2, 3, 4 or 8 bits, got {}", where,
                bits);
  PACKRAT_CHECK(group_size >= 1, "{}: group_size must be at least 1, got {}", where, group_size);
}

namespace {

// The buffers of a quantized tensor against its geometry; the sizes a kernel writes blindly.
void check_same_size(const Tensor& x, const GroupGeometry& g, const Tensor& codes, const Tensor& meta,
                     const char* where) {
  PACKRAT_CHECK(x.numel() == g.numel && codes.nbytes() >= static_cast<size_t>(g.code_bytes()) &&
                    meta.nbytes() >= static_cast<size_t>(g.meta_bytes()),
                "{}: {} elements, {} code bytes and {} metadata bytes given; the geometry needs {}, {} and {}", where,
                x.numel(), codes.nbytes(), meta.nbytes(), g.numel, g.code_bytes(), g.meta_bytes());
}

}  // namespace

GroupGeometry group_geometry(int64_t numel, int64_t samples, const GroupQuantConfig& c) {
  c.check("group_geometry");
  GroupGeometry g;
  g.numel = numel;
  g.group_size = c.group_size;
  g.bits = c.bits;
  g.meta = c.meta;
  if (numel == 0) return g;  // no groups
  const bool per_sample = c.grouping == Grouping::PerSample && samples > 1 && numel % samples == 0;
  g.spans = per_sample ? samples : 1;
  g.span_len = numel / g.spans;
  g.groups_per_span = (g.span_len + c.group_size - 1) / c.group_size;
  g.tail_len = g.span_len - (g.groups_per_span - 1) * c.group_size;
  return g;
}

void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq) {
  check_codec_device("per-group quantization", x.device(), "quantize_groups runs on CPU tensors only");
  check_same_size(x, g, codes, meta, "quantize_groups");
  quantize_groups(x.data<float>(), g, rounding, noise, codes.data<uint8_t>(), meta.data<uint8_t>(), group_range_sq);
}

void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out) {
  check_codec_device("per-group quantization", codes.device(), "dequantize_groups runs on CPU tensors only");
  check_same_size(out, g, codes, meta, "dequantize_groups");
  dequantize_groups(codes.data<uint8_t>(), meta.data<uint8_t>(), g, out.data<float>());
}

}  // namespace packrat
