#include "quant/mixed/mixed_quant.h"

#include "core/build_config.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/codec/apply_derivative_sink.h"
#include "quant/codec/codec_device.h"
#include "quant/mixed/nhwc_buckets.h"
#if PACKRAT_HAVE_CUDA
#include "core/cuda/launch_check.h"
#endif

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

namespace {

MixedFormat format_of(const MixedPacked& p) { return MixedFormat{p.geometry(), p.base, p.mix, p.scale, p.meta}; }

#if PACKRAT_HAVE_CUDA

// Device scratch of the kernels (freed on return; the default stream orders its reuse).
Tensor device_scratch(int64_t n, DType dtype, Device d) { return Tensor::empty(Shape{n}, dtype, Layout::Plain, MemTag::Workspace, d); }

MixedPacked quantize_mixed_cuda(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise,
                                const CodecWalk& walk) {
  const Device d = x.device();
  const MemTag tag = TagScope::current();  // the caller's: the buffers held
  MixedPacked p = mixed_packed_header(x.numel(), c);
  const BucketGeometry g = p.geometry();
  const MixedFormat f = format_of(p);
  BucketFlags flags;     // uniform until decided per bucket
  BucketOffsets offsets;
  Tensor flag_bytes, offset_table;  // (buckets,) u8 and (buckets + 1,) i64 on the device, per-bucket decisions only
  int64_t code_bytes = 0;
  if (g.buckets == 0 || c.base == c.mix || c.decision == MixDecision::PerTensor) {
    // One width for every bucket: one Philox draw on the host, the offsets by arithmetic.
    flags.all_mix = g.buckets > 0 && bucket_takes_mix(c, noise.seed, noise.stream, 0);
    const BucketWidth& w = flags.all_mix ? c.mix : c.base;
    offsets.full_bytes = packed_bytes(g.bucket_size, w.code_bits);
    code_bytes = g.buckets ? (g.buckets - 1) * offsets.full_bytes + bucket_code_bytes(g, g.buckets - 1, w) : 0;
    p.mix_buckets = flags.all_mix ? g.buckets : 0;
  } else {
    flag_bytes = device_scratch(g.buckets, DType::u8, d);
    offset_table = device_scratch(g.buckets + 1, DType::i64, d);
    const Tensor totals = device_scratch(2, DType::i64, d);  // {code bytes, mix buckets}
    const size_t scan_bytes = cuda::mixed_scan_scratch_bytes(g.buckets);
    const Tensor scan = device_scratch(static_cast<int64_t>(scan_bytes), DType::u8, d);
    cuda::launch_decide_buckets(c, g, noise, flag_bytes.device_data<uint8_t>(), offset_table.device_data<int64_t>(),
                                totals.device_data<int64_t>(), scan.raw(), scan_bytes);
    cuda::check_last_launch("quantize_mixed (bucket decisions)");
    // The host allocates the codes, so it needs their size: the one synchronising copy (16 bytes).
    TagScope scratch(MemTag::Workspace);
    const Tensor host = totals.to(Device::cpu());
    code_bytes = host.data<int64_t>()[0];
    p.mix_buckets = host.data<int64_t>()[1];
    flags.data = flag_bytes.device_data<uint8_t>();
    offsets.offsets = offset_table.device_data<int64_t>();
  }
  p.uniform = p.mix_buckets == 0 || p.mix_buckets == g.buckets;
  p.uniform_is_mix = g.buckets > 0 && p.mix_buckets == g.buckets;

  p.codes = Tensor::empty(Shape{code_bytes}, DType::u8, Layout::Plain, tag, d);                               // (code bytes,)
  p.meta_data = Tensor::empty(Shape{g.buckets * bucket_meta_bytes(c.scale, c.meta)}, DType::u8, Layout::Plain, tag, d);  // (buckets, meta bytes)
  if (!p.uniform) {
    p.flags = Tensor::empty(Shape{packed_bytes(g.buckets, 1)}, DType::u8, Layout::Plain, tag, d);  // (buckets bits,)
    cuda::launch_pack_flags(flag_bytes.device_data<uint8_t>(), g.buckets, p.flags.device_data<uint8_t>());
  }
  cuda::launch_quantize_mixed(x.device_data<float>(), f, c.rounding, noise, flags, offsets,
                              p.codes.device_data<uint8_t>(), p.meta_data.device_data<uint8_t>(), walk);
  cuda::check_last_launch("quantize_mixed");
  return p;
}

// Where the device kernels find each bucket's width and codes: the packed flags held (or one width
// for all) and the code offsets, scanned on the device from the flags (by arithmetic for one width).
struct DeviceBucketTables {
  BucketFlags flags;
  BucketOffsets offsets;
  Tensor offset_table;  // (buckets + 1,) i64 on the device, mixed widths only
};

DeviceBucketTables device_bucket_tables(const MixedPacked& p, const MixedFormat& f, Device d) {
  DeviceBucketTables t;
  t.flags = BucketFlags{nullptr, true, p.uniform_is_mix};
  if (p.uniform) {
    const BucketWidth& w = p.uniform_is_mix ? p.mix : p.base;
    t.offsets.full_bytes = packed_bytes(f.g.bucket_size, w.code_bits);
    const int64_t code_bytes = (f.g.buckets - 1) * t.offsets.full_bytes + bucket_code_bytes(f.g, f.g.buckets - 1, w);
    PACKRAT_CHECK(p.codes.numel() == code_bytes, "mixed dequantization: {} code bytes held, the widths say {}",
                  p.codes.numel(), code_bytes);
    return t;
  }
  // (The offsets stay on the device: the code size is not checked against them here, unlike the CPU.)
  t.flags.data = p.flags.device_data<uint8_t>();
  t.offset_table = device_scratch(f.g.buckets + 1, DType::i64, d);
  const size_t scan_bytes = cuda::mixed_scan_scratch_bytes(f.g.buckets);
  const Tensor scan = device_scratch(static_cast<int64_t>(scan_bytes), DType::u8, d);
  cuda::launch_code_offsets(f, t.flags, t.offset_table.device_data<int64_t>(), scan.raw(), scan_bytes);
  t.offsets.offsets = t.offset_table.device_data<int64_t>();
  return t;
}

void dequantize_mixed_cuda(const MixedPacked& p, const Tensor& out, const CodecWalk& walk) {
  const MixedFormat f = format_of(p);
  if (f.g.buckets == 0) return;
  const DeviceBucketTables t = device_bucket_tables(p, f, out.device());
  cuda::launch_dequantize_mixed(p.codes.device_data<uint8_t>(), p.meta_data.device_data<uint8_t>(), f, t.flags,
                                t.offsets, out.device_data<float>(), walk);
  cuda::check_last_launch("dequantize_mixed");
}

void dequantize_mixed_apply_cuda(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                                 const Tensor& gx, const CodecWalk& walk) {
  const MixedFormat f = format_of(p);
  if (f.g.buckets == 0) return;
  const DeviceBucketTables t = device_bucket_tables(p, f, gx.device());
  cuda::launch_dequantize_mixed_apply(p.codes.device_data<uint8_t>(), p.meta_data.device_data<uint8_t>(), f, t.flags,
                                      t.offsets, fn, from_output, grad.device_data<float>(), gx.device_data<float>(),
                                      walk);
  cuda::check_last_launch("dequantize_mixed_apply");
}
#endif

// The fused backward on the host: DequantizeBucketQuadsBody bucket by bucket, with the held flags
// and the offsets summed from them.
void dequantize_mixed_apply_on_host(const MixedPacked& p, ActivationId fn, bool from_output, const float* grad,
                                    float* gx) {
  const MixedFormat f = format_of(p);
  if (f.g.buckets == 0) return;
  const BucketFlags flags{p.uniform ? nullptr : p.flags.data<uint8_t>(), true, p.uniform_is_mix};
  const std::vector<int64_t> offsets = bucket_code_offsets(f.g, p.base, p.mix, flags);  // (buckets + 1,)
  PACKRAT_CHECK(p.codes.numel() == offsets.back(), "mixed dequantization: {} code bytes held, the flags say {}",
                p.codes.numel(), offsets.back());
  with_apply_derivative(fn, from_output, grad, gx, [&](auto sink) {
    const DequantizeBucketQuadsBody<decltype(sink)> body{p.codes.data<uint8_t>(), p.meta_data.data<uint8_t>(), f,
                                                         flags, BucketOffsets{offsets.data(), 0}, sink};
    rows_for(f.g.buckets, f.g.bucket_size, [&](int64_t b) { body(b, 0, 1); });
  });
}

// The kernels' walk of t on its device (mixed_codec_order), or a message naming `where` for a
// layout they do not walk.
CodecWalk walk_of(const Tensor& t, int64_t bucket_size, const char* where) {
  const CodecOrder o = mixed_codec_order(t.shape(), t.layout(), t.device(), bucket_size);
  PACKRAT_CHECK(!o.via_plain,
                "{}: a {} tensor on {} in buckets of {}: the codes follow the logical order, which the kernels there "
                "do not walk in this layout and size (the CPU's: plain and nChw16c; a GPU's: plain, and NHWC with "
                "buckets and planes up to 1024 values; give its plain copy)",
                where, t.describe(), t.device().str(), bucket_size);
  return o.walk;
}

}  // namespace

CodecOrder mixed_codec_order(const Shape& shape, Layout layout, Device d, int64_t bucket_size) {
  CodecOrder o;
  if (layout == Layout::Plain) return o;
  const CodecWalk walk{shape.rank() >= 2 ? shape[1] : 0, channel_plane(shape), layout == Layout::NHWC,
                       channel_block(layout)};
  if (channel_block(layout) && d.is_cpu()) {
    o.walk = walk;
  } else if (layout == Layout::NHWC && !d.is_cpu() &&
             nhwc_buckets_stageable(bucket_geometry(shape.numel(), bucket_size), walk)) {
    o.walk = walk;
  } else {
    o.via_plain = true;
  }
  return o;
}

MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) {
  PACKRAT_CHECK(x.dtype() == DType::f32, "quantize_mixed: the input is {}, expected f32", x.describe());
  if (x.is_cpu())
    return quantize_mixed(x.data<float>(), x.numel(), c, noise, walk_of(x, c.bucket_size, "quantize_mixed"));
  MixedPacked emulated;  // the CPU kernel's buffers, moved to x's device (the test seam of codec_device.h)
  if (codec_ran_on_host(x.device(), {x}, [&] { emulated = quantize_mixed(x, c, noise); })) {
    for (Tensor* t : {&emulated.codes, &emulated.meta_data, &emulated.flags})
      if (t->defined()) *t = t->to(x.device());
    return emulated;
  }
#if PACKRAT_HAVE_CUDA
  c.check("mixed quantization");
  return quantize_mixed_cuda(x, c, noise, walk_of(x, c.bucket_size, "quantize_mixed"));
#else
  fail("quantize_mixed: the input is on {}, but this packrat was built without CUDA", x.device().str());
#endif
}

void dequantize_mixed(const MixedPacked& p, const Tensor& out) {
  PACKRAT_CHECK(out.numel() == p.numel && out.dtype() == DType::f32,
                "mixed dequantization: {} elements held, the output is {}", p.numel, out.describe());
  const Device d = out.device();
  const bool one_device = (!p.codes.defined() || p.codes.device() == d) &&
                          (!p.meta_data.defined() || p.meta_data.device() == d) &&
                          (!p.flags.defined() || p.flags.device() == d);
  PACKRAT_CHECK(one_device, "dequantize_mixed: codes on {}, metadata on {}{}, output on {}",
                p.codes.defined() ? p.codes.device().str() : "-", p.meta_data.defined() ? p.meta_data.device().str() : "-",
                p.flags.defined() ? ", flags on " + p.flags.device().str() : "", d.str());
  if (out.is_cpu()) {
    dequantize_mixed(p, out.data<float>(), walk_of(out, p.bucket_size, "dequantize_mixed"));
    return;
  }
  if (codec_ran_on_host(d, {p.codes, p.meta_data, p.flags, out}, [&] { dequantize_mixed(p, out); })) return;
#if PACKRAT_HAVE_CUDA
  dequantize_mixed_cuda(p, out, walk_of(out, p.bucket_size, "dequantize_mixed"));
#else
  fail("dequantize_mixed: the output is on {}, but this packrat was built without CUDA", d.str());
#endif
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
  auto on_host = [&] {
    PACKRAT_CHECK(gx.layout() == Layout::Plain, "dequantize_mixed_apply: an NHWC gradient on the host ({})",
                  gx.describe());
    dequantize_mixed_apply_on_host(p, fn, from_output, grad.data<float>(), gx.data<float>());
  };
  if (d.is_cpu()) return on_host();
  if (codec_ran_on_host(d, {p.codes, p.meta_data, p.flags, grad, gx}, on_host)) return;
#if PACKRAT_HAVE_CUDA
  dequantize_mixed_apply_cuda(p, fn, from_output, grad, gx, walk_of(gx, p.bucket_size, "dequantize_mixed_apply"));
#else
  fail("dequantize_mixed_apply: the output is on {}, but this packrat was built without CUDA", d.str());
#endif
}

}  // namespace packrat
