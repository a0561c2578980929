#include "quant/mixed_quant.h"

#include "core/error.h"
#include "quant/codec_device.h"

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

MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) {
  check_codec_device("mixed quantization", x.device(), "quantize_mixed runs on CPU tensors only");
  return quantize_mixed(x.data<float>(), x.numel(), c, noise);
}

void dequantize_mixed(const MixedPacked& p, const Tensor& out) {
  check_codec_device("mixed quantization", p.codes.defined() ? p.codes.device() : out.device(),
                     "dequantize_mixed runs on CPU tensors only");
  PACKRAT_CHECK(out.numel() == p.numel, "mixed dequantization: {} elements held, the output has {}", p.numel, out.numel());
  dequantize_mixed(p, out.data<float>());
}

}  // namespace packrat
