#include "quant/mixed/mixed_quant.h"

#include "core/error.h"
#include "quant/codec/codec_kernels.h"
#include "quant/mixed/nhwc_buckets.h"

namespace packrat {

std::string_view scale_rule_name(ScaleRule s) {
  switch (s) {
    case ScaleRule::Affine: return "affine";
    case ScaleRule::MaxAbs: return "maxabs";
    case ScaleRule::L2: return "l2";
  }
  return "?";
}

std::string_view mix_decision_name(MixDecision d) { return d == MixDecision::PerBucket ? "per_bucket" : "per_tensor"; }

BucketWidth affine_width(int bits) {
  PACKRAT_CHECK(bits >= 1 && bits <= kMaxCodeBits, "affine quantization: bits must be in [1, {}], got {}", kMaxCodeBits,
                bits);
  return BucketWidth{bits, (1u << bits) - 1u, bits};
}

BucketWidth sign_magnitude_width(uint32_t levels) {
  PACKRAT_CHECK(levels >= 1, "sign-magnitude quantization: levels must be at least 1, got {}", levels);
  const int cb = sign_magnitude_code_bits(levels);
  PACKRAT_CHECK(cb <= kMaxCodeBits,
                "sign-magnitude quantization: {} levels need {}-bit codes (2L+1 values), more than the {} supported",
                levels, cb, kMaxCodeBits);
  int label = 1;
  while ((uint64_t{1} << label) < levels) ++label;
  return BucketWidth{label, levels, cb};
}

BucketWidth width_for_bits(ScaleRule s, int bits) {
  if (!is_sign_magnitude(s)) return affine_width(bits);
  PACKRAT_CHECK(bits >= 1 && bits <= kMaxCodeBits - 2,
                "sign-magnitude quantization: bits must be in [1, {}] (L = 2^bits levels and the sign take bits + 2 "
                "bits), got {}",
                kMaxCodeBits - 2, bits);
  return sign_magnitude_width(1u << bits);
}

void MixedQuantConfig::check(std::string_view where) const {
  PACKRAT_CHECK(bucket_size >= 1, "{}: bucket_size must be at least 1, got {}", where, bucket_size);
  PACKRAT_CHECK(mix_prob >= 0.0 && mix_prob <= 1.0, "{}: mix_prob must be a probability in [0, 1], got {}", where,
                mix_prob);
  for (const BucketWidth* w : {&base, &mix}) {
    PACKRAT_CHECK(w->code_bits >= 1 && w->code_bits <= kMaxCodeBits, "{}: {}-bit codes are not supported (1 to {})",
                  where, w->code_bits, kMaxCodeBits);
    const bool ok = is_sign_magnitude(scale) ? *w == sign_magnitude_width(w->levels) : *w == affine_width(w->bits);
    PACKRAT_CHECK(ok, "{}: width ({} bits, {} levels, {}-bit codes) does not fit the {} scale rule", where, w->bits,
                  w->levels, w->code_bits, scale_rule_name(scale));
  }
  PACKRAT_CHECK(mix.levels >= base.levels,
                "{}: mix_bits ({}, {} levels) must not be below base_bits ({}, {} levels): the mix width is the higher one",
                where, mix.bits, mix.levels, base.bits, base.levels);
}

BucketGeometry bucket_geometry(int64_t numel, int64_t bucket_size) {
  PACKRAT_CHECK(bucket_size >= 1, "bucket geometry: bucket_size must be at least 1, got {}", bucket_size);
  PACKRAT_CHECK(numel >= 0, "bucket geometry: negative element count {}", numel);
  BucketGeometry g;
  g.numel = numel;
  g.bucket_size = bucket_size;
  g.buckets = (numel + bucket_size - 1) / bucket_size;
  g.tail_len = g.buckets ? numel - (g.buckets - 1) * bucket_size : 0;
  return g;
}

int64_t MixedPacked::bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&codes, &meta_data, &flags})
    if (t->defined()) b += static_cast<int64_t>(t->storage()->allocation->bytes());
  return b;
}

double MixedPacked::code_bits_per_element() const {
  if (!numel) return 0.0;
  return 8.0 * static_cast<double>(codes.defined() ? codes.nbytes() : 0) / static_cast<double>(numel);
}

int64_t mixed_bytes_formula(const BucketGeometry& g, const MixedQuantConfig& c, const std::vector<uint8_t>& flags) {
  PACKRAT_CHECK(static_cast<int64_t>(flags.size()) == g.buckets, "mixed bytes: {} flags for {} buckets", flags.size(),
                g.buckets);
  int64_t codes = 0, mixes = 0;
  for (int64_t b = 0; b < g.buckets; ++b) {
    codes += packed_bytes(g.len(b), flags[static_cast<size_t>(b)] ? c.mix.code_bits : c.base.code_bits);
    mixes += flags[static_cast<size_t>(b)] ? 1 : 0;
  }
  const bool uniform = mixes == 0 || mixes == g.buckets;
  return codes + g.buckets * bucket_meta_bytes(c.scale, c.meta) + (uniform ? 0 : packed_bytes(g.buckets, 1));
}

std::vector<int64_t> bucket_code_offsets(const BucketGeometry& g, const BucketWidth& base, const BucketWidth& mix,
                                         const BucketFlags& flags) {
  std::vector<int64_t> off(static_cast<size_t>(g.buckets + 1), 0);  // (buckets + 1,)
  for (int64_t b = 0; b < g.buckets; ++b)
    off[static_cast<size_t>(b + 1)] = off[static_cast<size_t>(b)] + bucket_code_bytes(g, b, flags(b) ? mix : base);
  return off;
}

MixedPacked mixed_packed_header(int64_t numel, const MixedQuantConfig& c) {
  MixedPacked p;
  p.numel = numel;
  p.bucket_size = c.bucket_size;
  p.base = c.base;
  p.mix = c.mix;
  p.scale = c.scale;
  p.meta = c.meta;
  return p;
}

MixedFormat mixed_format_of(const MixedPacked& p) { return MixedFormat{p.geometry(), p.base, p.mix, p.scale, p.meta}; }

// The kernels' walk of t on its device (mixed_codec_order), or a message naming `where` for a
// layout they do not walk.
CodecWalk mixed_walk_of(const Tensor& t, int64_t bucket_size, const char* where) {
  const CodecOrder o = mixed_codec_order(t.shape(), t.layout(), t.device(), bucket_size);
  PACKRAT_CHECK(!o.via_plain,
                "{}: a {} tensor on {} in buckets of {}: the codes follow the logical order, which the kernels there "
                "do not walk in this layout and size (the CPU's: plain, blocked and NHWC; a GPU's: plain, and NHWC with "
                "buckets and planes up to 1024 values; give its plain copy)",
                where, t.describe(), t.device().str(), bucket_size);
  return o.walk;
}


CodecOrder mixed_codec_order(const Shape& shape, Layout layout, Device d, int64_t bucket_size) {
  CodecOrder o;
  if (layout == Layout::Plain) return o;
  const CodecWalk walk{shape.rank() >= 2 ? shape[1] : 0, channel_plane(shape), layout == Layout::NHWC,
                       channel_block(layout)};
  if (channel_block(layout) && d.is_cpu()) {
    o.walk = walk;
  } else if (layout == Layout::NHWC && d.is_cpu()) {
    o.walk = nhwc_as_blocked(shape);  // as the group codecs walk it there (codec_order)
  } else if (layout == Layout::NHWC && codecs(d, "mixed_codec_order: the input").walks_nhwc() &&
             nhwc_buckets_stageable(bucket_geometry(shape.numel(), bucket_size), walk)) {
    o.walk = walk;
  } else {
    o.via_plain = true;
  }
  return o;
}

MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) {
  PACKRAT_CHECK(x.dtype() == DType::f32 || (x.dtype() == DType::bf16 && x.device().is_cpu()),
                "quantize_mixed: the input is {}, expected f32 (or bf16 on the CPU)", x.describe());
  return codecs(x.device(), "quantize_mixed: the input").quantize_mixed(x, c, noise);
}

void dequantize_mixed(const MixedPacked& p, const Tensor& out) {
  PACKRAT_CHECK(out.numel() == p.numel && (out.dtype() == DType::f32 || (out.dtype() == DType::bf16 && out.device().is_cpu())),
                "mixed dequantization: {} elements held, the output is {} (f32, or bf16 on the CPU)", p.numel,
                out.describe());
  const Device d = out.device();
  const bool one_device = (!p.codes.defined() || p.codes.device() == d) &&
                          (!p.meta_data.defined() || p.meta_data.device() == d) &&
                          (!p.flags.defined() || p.flags.device() == d);
  PACKRAT_CHECK(one_device, "dequantize_mixed: codes on {}, metadata on {}{}, output on {}",
                p.codes.defined() ? p.codes.device().str() : "-", p.meta_data.defined() ? p.meta_data.device().str() : "-",
                p.flags.defined() ? ", flags on " + p.flags.device().str() : "", d.str());
  codecs(d, "dequantize_mixed: the output").dequantize_mixed(p, out);
}

void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                            const Tensor& gx) {
  PACKRAT_CHECK(grad.numel() == p.numel && grad.dtype() == DType::f32 && gx.numel() == p.numel &&
                    gx.dtype() == DType::f32,
                "dequantize_mixed_apply: {} elements held; the gradient is {}, the output {}", p.numel,
                grad.describe(), gx.describe());
  PACKRAT_CHECK(static_cast<int>(fn) < kNumActivations, "dequantize_mixed_apply: no activation with id {}",
                static_cast<int>(fn));
  PACKRAT_CHECK(grad.layout() == gx.layout() && (grad.layout() == Layout::Plain || grad.layout() == Layout::NHWC),
                "dequantize_mixed_apply: the gradient ({}) and the output ({}) must be plain, in the codes' "
                "logical order, or both NHWC on a GPU",
                grad.describe(), gx.describe());
  const Device d = gx.device();
  const bool one_device = grad.device() == d && (!p.codes.defined() || p.codes.device() == d) &&
                          (!p.meta_data.defined() || p.meta_data.device() == d) &&
                          (!p.flags.defined() || p.flags.device() == d);
  PACKRAT_CHECK(one_device, "dequantize_mixed_apply: codes on {}, gradient on {}, output on {}",
                p.codes.defined() ? p.codes.device().str() : "-", grad.device().str(), d.str());
  codecs(d, "dequantize_mixed_apply: the output").dequantize_mixed_apply(p, fn, from_output, grad, gx);
}

}  // namespace packrat
