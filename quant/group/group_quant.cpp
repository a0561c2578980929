#include "quant/group/group_quant.h"

#include <algorithm>

#include "core/backend.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "quant/codec/codec_kernels.h"
#include "quant/group/nhwc_tile.h"

namespace packrat {

std::string_view grouping_name(Grouping g) {
  switch (g) {
    case Grouping::PerSample: return "per_sample";
    case Grouping::Flat: return "flat";
    case Grouping::PerPlane: return "per_plane";
  }
  return "?";
}
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

GroupGeometry group_geometry(int64_t numel, int64_t samples, const GroupQuantConfig& c, int64_t plane) {
  c.check("group_geometry");
  GroupGeometry g;
  g.numel = numel;
  g.group_size = c.group_size;
  g.bits = c.bits;
  g.meta = c.meta;
  if (numel == 0) return g;  // no groups
  const bool split_samples = samples > 1 && numel % samples == 0;
  const bool per_plane = c.grouping == Grouping::PerPlane && plane > 0 && (numel / std::max<int64_t>(1, samples)) % plane == 0;
  if (per_plane && plane >= c.group_size) {
    g.spans = numel / plane;  // one span per plane, cut into groups of equal length
    const int64_t groups = (plane + c.group_size - 1) / c.group_size;
    g.group_size = (plane + groups - 1) / groups;
  } else {
    g.spans = (c.grouping != Grouping::Flat && split_samples) ? samples : 1;
    if (per_plane) g.group_size = plane * (c.group_size / plane);  // whole planes to a group
  }
  g.span_len = numel / g.spans;
  g.groups_per_span = (g.span_len + g.group_size - 1) / g.group_size;
  g.tail_len = g.span_len - (g.groups_per_span - 1) * g.group_size;
  return g;
}

int64_t leading_samples(const Tensor& x) { return x.rank() >= 2 ? x.dim(0) : 1; }

int64_t channel_plane(const Shape& shape) {
  if (shape.rank() < 3) return 0;
  int64_t plane = 1;
  for (int64_t d = 2; d < shape.rank(); ++d) plane *= shape[d];
  return plane;
}
int64_t channel_plane(const Tensor& x) { return channel_plane(x.shape()); }

CodecWalk nhwc_as_blocked(const Shape& s) { return CodecWalk{s[1], s[2] * s[3], false, s[1]}; }

// An NHWC tensor is walked in plain order under every grouping, so that its groups and codes are
// the plain tensor's, as for a blocked one: on a GPU staged through shared memory where its kernels
// can, else through a plain copy; the CPU's kernels walk it as a blocked tensor of one block of all
// C channels (nhwc_as_blocked).
CodecOrder codec_order(const Tensor& x, const GroupGeometry& g) {
  CodecOrder o;
  if (const int64_t block = channel_block(x.layout())) {
    o.walk = {x.dim(1), channel_plane(x), false, block};
  } else if (x.layout() == Layout::NHWC) {
    const CodecWalk nhwc{x.dim(1), channel_plane(x), true};
    if (!codecs(x.device(), "codec_order: the input").walks_nhwc())
      o.walk = nhwc_as_blocked(x.shape());
    else if (nhwc_stageable(g, nhwc))
      o.walk = nhwc;
    else
      o.via_plain = true;
  }
  return o;
}

Tensor in_codec_order(const Tensor& x, const CodecOrder& o) {
  if (!o.via_plain) return x;
  const TagScope scratch(MemTag::Workspace);
  return x.to_plain();
}

GroupGeometry group_geometry_of(const Tensor& x, const GroupQuantConfig& c) {
  return group_geometry(x.numel(), leading_samples(x), c, channel_plane(x));
}

void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq,
                     CodecWalk walk) {
  check_same_size(x, g, codes, meta, "quantize_groups");
  PACKRAT_CHECK(codes.device() == x.device() && meta.device() == x.device(),
                "quantize_groups: input on {}, codes on {}, metadata on {}", x.device().str(), codes.device().str(),
                meta.device().str());
  // The CPU's kernels read bf16 as it lies (the codes of its f32 values); f16, and bf16 on another
  // device or in longer groups, is converted to an f32 copy first (any other dtype: the kernels' error).
  const bool widen =
      is_half(x.dtype()) && !(x.dtype() == DType::bf16 && x.is_cpu() && g.group_size <= kMaxStagedGroup);
  const Tensor xs = widen ? x.to(DType::f32) : x;
  codecs(x.device(), "quantize_groups: the input")
      .quantize_groups(xs, g, rounding, noise, codes, meta, group_range_sq, walk);
}

void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                       CodecWalk walk) {
  check_same_size(out, g, codes, meta, "dequantize_groups");
  PACKRAT_CHECK(codes.device() == out.device() && meta.device() == out.device(),
                "dequantize_groups: codes on {}, metadata on {}, output on {}", codes.device().str(),
                meta.device().str(), out.device().str());
  // The CPU's kernels write bf16 themselves; elsewhere a 16-bit out is converted from f32 values.
  if (!is_half(out.dtype()) || (out.dtype() == DType::bf16 && out.is_cpu())) {
    codecs(out.device(), "dequantize_groups: the codes").dequantize_groups(codes, meta, g, out, walk);
    return;
  }
  Tensor values = Tensor::empty(out.shape(), DType::f32, out.layout(), MemTag::Workspace, out.device());
  codecs(out.device(), "dequantize_groups: the codes").dequantize_groups(codes, meta, g, values, walk);
  Tensor dst = out;  // a handle to out's buffer
  backend(out.device()).convert(values, dst);
}

void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, ActivationId fn,
                             bool from_output, const Tensor& grad, const Tensor& gx, CodecWalk walk) {
  check_same_size(grad, g, codes, meta, "dequantize_groups_apply");
  PACKRAT_CHECK(static_cast<int>(fn) < kNumActivations, "dequantize_groups_apply: no activation with id {}",
                static_cast<int>(fn));
  PACKRAT_CHECK(grad.dtype() == DType::f32 && gx.dtype() == DType::f32 && gx.numel() == grad.numel(),
                "dequantize_groups_apply: gradient {} and output {} must be f32 of {} elements", grad.describe(),
                gx.describe(), g.numel);
  PACKRAT_CHECK(grad.device() == codes.device() && gx.device() == codes.device() && meta.device() == codes.device(),
                "dequantize_groups_apply: codes on {}, metadata on {}, gradient on {}, output on {}",
                codes.device().str(), meta.device().str(), grad.device().str(), gx.device().str());
  codecs(codes.device(), "dequantize_groups_apply: the codes")
      .dequantize_groups_apply(codes, meta, g, fn, from_output, grad, gx, walk);
}

}  // namespace packrat
