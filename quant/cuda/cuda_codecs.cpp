// The CUDA codec kernels as a table (quant/codec/codec_kernels.h): the GPU-only checks, then the
// launchers of this folder's kernels (quant/cuda/launchers.h), on the tensors' device memory. The
// mixed quantizer's per-bucket widths are decided and scanned on the device; the host reads back
// only what it must allocate.
#include "quant/cuda/cuda_codecs.h"

#include "autograd/pointwise.h"
#include "core/cuda/launch_check.h"
#include "core/error.h"
#include "quant/cuda/launchers.h"

namespace packrat {

namespace {

// The NHWC decode reads a group's record in whole 32-bit words (quant/group/nhwc_decode.h): the metadata
// must start on a 4-byte boundary (its own allocation does; a view might not).
void check_records_aligned(const Tensor& meta, const CodecWalk& walk, const char* where) {
  PACKRAT_CHECK(!walk.nhwc || reinterpret_cast<uintptr_t>(meta.device_data<uint8_t>()) % 4 == 0,
                "{}: the metadata ({}) does not start on a 4-byte boundary, which the NHWC decode reads in words",
                where, meta.describe());
}

// Device scratch of the kernels (freed on return; the default stream orders its reuse).
Tensor device_scratch(int64_t n, DType dtype, Device d) { return Tensor::empty(Shape{n}, dtype, Layout::Plain, MemTag::Workspace, d); }

MixedPacked quantize_mixed_cuda(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise,
                                const CodecWalk& walk) {
  const Device d = x.device();
  const MemTag tag = TagScope::current();  // the caller's: the buffers held
  MixedPacked p = mixed_packed_header(x.numel(), c);
  const BucketGeometry g = p.geometry();
  const MixedFormat f = mixed_format_of(p);
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
  const MixedFormat f = mixed_format_of(p);
  if (f.g.buckets == 0) return;
  const DeviceBucketTables t = device_bucket_tables(p, f, out.device());
  cuda::launch_dequantize_mixed(p.codes.device_data<uint8_t>(), p.meta_data.device_data<uint8_t>(), f, t.flags,
                                t.offsets, out.device_data<float>(), walk);
  cuda::check_last_launch("dequantize_mixed");
}

void dequantize_mixed_apply_cuda(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                                 const Tensor& gx, const CodecWalk& walk) {
  const MixedFormat f = mixed_format_of(p);
  if (f.g.buckets == 0) return;
  const DeviceBucketTables t = device_bucket_tables(p, f, gx.device());
  cuda::launch_dequantize_mixed_apply(p.codes.device_data<uint8_t>(), p.meta_data.device_data<uint8_t>(), f, t.flags,
                                      t.offsets, fn, from_output, grad.device_data<float>(), gx.device_data<float>(),
                                      walk);
  cuda::check_last_launch("dequantize_mixed_apply");
}

class CudaCodecs final : public CodecKernels {
 public:
  bool walks_nhwc() const override { return true; }
  void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                       const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq,
                       const CodecWalk& walk) override {
    PACKRAT_CHECK(walk.channels == 0 || walk.nhwc, "quantize_groups: a channel-blocked walk on {} (a CPU layout)",
                  x.device().str());
    Tensor range_sq;  // (groups) f64 on the device, copied to the host afterwards
    if (group_range_sq)
      range_sq = Tensor::empty(Shape{g.groups()}, DType::f64, Layout::Plain, MemTag::Workspace, x.device());
    cuda::launch_quantize_groups(x.device_data<float>(), g, rounding, noise, codes.device_data<uint8_t>(),
                                 meta.device_data<uint8_t>(), group_range_sq ? range_sq.device_data<double>() : nullptr,
                                 walk);
    cuda::check_last_launch("quantize_groups");
    if (group_range_sq) {
      const Tensor host = range_sq.to(Device::cpu());
      group_range_sq->assign(host.data<double>(), host.data<double>() + g.groups());
    }
  }
  void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                         const CodecWalk& walk) override {
    PACKRAT_CHECK(walk.channels == 0 || walk.nhwc, "dequantize_groups: a channel-blocked walk on {} (a CPU layout)",
                  out.device().str());
    check_records_aligned(meta, walk, "dequantize_groups");
    cuda::launch_dequantize_groups(codes.device_data<uint8_t>(), meta.device_data<uint8_t>(), g,
                                   out.device_data<float>(), walk);
    cuda::check_last_launch("dequantize_groups");
  }
  void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, ActivationId fn,
                               bool from_output, const Tensor& grad, const Tensor& gx,
                               const CodecWalk& walk) override {
    PACKRAT_CHECK(walk.channels == 0 || walk.nhwc,
                  "dequantize_groups_apply: a channel-blocked walk on {} (a CPU layout)", codes.device().str());
    check_records_aligned(meta, walk, "dequantize_groups_apply");
    cuda::launch_dequantize_groups_apply(codes.device_data<uint8_t>(), meta.device_data<uint8_t>(), g, fn,
                                         from_output, grad.device_data<float>(), gx.device_data<float>(), walk);
    cuda::check_last_launch("dequantize_groups_apply");
  }

  MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) override {
    c.check("mixed quantization");
    return quantize_mixed_cuda(x, c, noise, mixed_walk_of(x, c.bucket_size, "quantize_mixed"));
  }
  void dequantize_mixed(const MixedPacked& p, const Tensor& out) override {
    dequantize_mixed_cuda(p, out, mixed_walk_of(out, p.bucket_size, "dequantize_mixed"));
  }
  void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                              const Tensor& gx) override {
    dequantize_mixed_apply_cuda(p, fn, from_output, grad, gx, mixed_walk_of(gx, p.bucket_size, "dequantize_mixed_apply"));
  }

  void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y,
                     const Tensor& packed) override {
    PACKRAT_CHECK(c.bits >= 1 && c.bits <= 4, "fewbit encode: bits must be in [1, 4], got {}", c.bits);
    PACKRAT_CHECK(fn || (c.kind != FewbitKind::Step && !y.defined()),
                  "fewbit encode: a step mask or the forward value needs the activation");
    const ActivationId id = fn ? fn->id : ActivationId::relu;
    cuda::launch_fewbit_encode(c, fn ? &id : nullptr, src.raw(), y.defined() ? y.device_data<float>() : nullptr,
                               src.numel(), packed.device_data<uint8_t>());
    cuda::check_last_launch("fewbit encode");
  }
  void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) override {
    PACKRAT_CHECK(c.bits >= 1 && c.bits <= 4, "fewbit decode: bits must be in [1, 4], got {}", c.bits);
    cuda::launch_fewbit_decode(c, packed.device_data<uint8_t>(), grad.defined() ? grad.device_data<float>() : nullptr,
                               out.device_data<float>(), out.numel());
    cuda::check_last_launch("fewbit decode");
  }

  void fp8_encode(const Tensor& x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, const Tensor& codes,
                  const Tensor& scales) override {
    Tensor amax;  // (1,) f32 on the device: the tensor's amax (per_tensor)
    if (s == Fp8Scale::PerTensor)
      amax = Tensor::empty(Shape{1}, DType::f32, Layout::Plain, MemTag::Workspace, x.device());
    cuda::launch_fp8_encode(x.device_data<float>(), f, s, g, codes.device_data<uint8_t>(),
                            scales.device_data<float>(), s == Fp8Scale::PerTensor ? amax.device_data<float>() : nullptr);
    cuda::check_last_launch("fp8_encode");
  }
  void fp8_decode(const Tensor& codes, const Tensor& scales, Fp8Format f, const Fp8Geometry& g,
                  const Tensor& out) override {
    cuda::launch_fp8_decode(codes.device_data<uint8_t>(), scales.device_data<float>(), f, g,
                            out.device_data<float>());
    cuda::check_last_launch("fp8_decode");
  }

  int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) override {
    const Tensor flag = Tensor::empty({1}, DType::i64, Layout::Plain, MemTag::Workspace, src.device());  // (1,)
    cuda::launch_pack_codes(src.raw(), static_cast<int>(dtype_size(src.dtype())), src.numel(), bits,
                            packed.device_data<uint8_t>(), flag.device_data<int64_t>());
    cuda::check_last_launch("pack_codes");
    return flag.to(Device::cpu()).data<int64_t>()[0];  // the one host read: whether the codes are exact
  }
  void unpack_codes(const Tensor& packed, int bits, const Tensor& out) override {
    cuda::launch_unpack_codes(packed.device_data<uint8_t>(), out.numel(), bits, out.raw(),
                              static_cast<int>(dtype_size(out.dtype())));
    cuda::check_last_launch("unpack_codes");
  }
};

}  // namespace

CodecKernels& cuda_codecs() {
  static CudaCodecs* c = new CudaCodecs();  // never destroyed, like the backends
  return *c;
}

}  // namespace packrat
