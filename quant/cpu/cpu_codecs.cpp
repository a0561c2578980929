// The CPU's codec kernels as a table (quant/codec/codec_kernels.h): the CPU-only checks, then the
// host-pointer kernels of this folder (group_quant_cpu.cpp, mixed_quant_cpu.cpp,
// fewbit_codec_cpu.cpp, fp8_codec_cpu.cpp, bitpack_cpu.cpp); the fused backward runs the kernels' per-index bodies on
// the host.
#include "quant/cpu/cpu_codecs.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/parallel.h"
#include "quant/bits/bitpack.h"
#include "quant/bits/bitpack_device.h"
#include "quant/codec/apply_derivative_sink.h"
#include "quant/fp8/fp8_codec.h"
#include "quant/group/group_quant_warp.h"
#include "quant/mixed/mixed_kernel_bodies.h"
#include "quant/store/with_integers.h"

namespace packrat {

namespace {

constexpr int64_t kGrainBlocks = kMinParallelWork / 8;  // blocks of 8 codes per thread chunk, at least

// Index of the first of n values outside [0, limit), or -1. Blocks are checked in parallel by
// their least and greatest values (a min / max reduction vectorises; a scalar loop with an early
// exit, or with a flag or-ed per value, did not: 7% of the BERT GACT-L1 step's extra time, perf);
// a block holding an unfit value is scanned again for its first, and the earliest block's wins.
template <typename T>
int64_t first_unfit(const T* x, int64_t n, int64_t limit) {
  using Limits = std::numeric_limits<T>;
  if (!Limits::is_signed && limit > static_cast<int64_t>(Limits::max())) return -1;  // every value fits
  const T top = limit > static_cast<int64_t>(Limits::max()) ? Limits::max() : static_cast<T>(limit - 1);
  const auto unfit = [top](T v) -> bool {
    if constexpr (Limits::is_signed) return v < T{0} || v > top;
    return v > top;
  };
  constexpr int64_t kBlock = 4096;  // values per check
  std::atomic<int64_t> first{n};
  parallel_chunks((n + kBlock - 1) / kBlock, kMinParallelWork / kBlock, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t lo = blk * kBlock, hi = std::min(n, lo + kBlock);
      const T* v = x + lo;
      T least = v[0], greatest = v[0];
      for (int64_t i = 0; i < hi - lo; ++i) {
        const T value = v[i];
        least = value < least ? value : least;
        greatest = value > greatest ? value : greatest;
      }
      if (!unfit(least) && !unfit(greatest)) continue;
      int64_t i = lo;
      while (!unfit(x[i])) ++i;
      for (int64_t seen = first.load(); i < seen && !first.compare_exchange_weak(seen, i);) {
      }
      return;  // later blocks of this chunk can only be later
    }
  });
  return first.load() < n ? first.load() : -1;
}

int64_t pack_codes_cpu(const Tensor& src, int bits, uint8_t* dst) {
  const int64_t n = src.numel();
  int64_t bad = -1;
  with_integers(src, [&](const auto* p) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    bad = first_unfit(p, n, int64_t{1} << bits);
    if (bad >= 0) return;
    if constexpr (std::is_same_v<T, uint8_t>) {
      pack_bits(p, n, bits, dst);
    } else {  // wider integers: packed straight from their values, no u8 copy
      const PackCodesBody<T, IgnoreUnfit> body{p, n, bits, dst, {}};
      parallel_chunks((n + 7) / 8, kGrainBlocks, [&](int64_t b, int64_t e) {
        for (int64_t blk = b; blk < e; ++blk) body(blk);
      });
    }
  });
  return bad;
}

void unpack_codes_cpu(const uint8_t* src, int bits, const Tensor& out) {
  const int64_t n = out.numel();
  with_integers(out, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same_v<T, uint8_t>) {
      unpack_bits(src, n, bits, p);
    } else {
      const UnpackCodesBody<T> body{src, n, bits, p};
      parallel_chunks((n + 7) / 8, kGrainBlocks, [&](int64_t b, int64_t e) {
        for (int64_t blk = b; blk < e; ++blk) body(blk);
      });
    }
  });
}

// The one-pass backward on the host: each group's quads in order, groups in parallel where the
// tensor is large enough to pay for it.
void dequantize_groups_apply_on_host(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g,
                                     ActivationId fn, bool from_output, const float* grad, float* gx) {
  with_apply_derivative(fn, from_output, grad, gx, [&](auto sink) {
    const DequantizeQuadsBody<decltype(sink)> body{codes, meta, g, sink};
    rows_for(g.groups(), g.group_size, [&](int64_t group) { body(group, 0, 1); });
  });
}

// The fused backward on the host: DequantizeBucketQuadsBody bucket by bucket, with the held flags
// and the offsets summed from them.
void dequantize_mixed_apply_on_host(const MixedPacked& p, ActivationId fn, bool from_output, const float* grad,
                                    float* gx) {
  const MixedFormat f = mixed_format_of(p);
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

class CpuCodecs final : public CodecKernels {
 public:
  void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                       const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq,
                       const CodecWalk& walk) override {
    PACKRAT_CHECK(!walk.nhwc, "quantize_groups: an NHWC walk on the CPU (a GPU layout)");
    if (x.dtype() == DType::bf16)
      packrat::quantize_groups(x.data<bf16_t>(), g, rounding, noise, codes.data<uint8_t>(), meta.data<uint8_t>(),
                               group_range_sq, walk);
    else
      packrat::quantize_groups(x.data<float>(), g, rounding, noise, codes.data<uint8_t>(), meta.data<uint8_t>(),
                               group_range_sq, walk);
  }
  void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                         const CodecWalk& walk) override {
    PACKRAT_CHECK(!walk.nhwc, "dequantize_groups: an NHWC walk on the CPU (a GPU layout)");
    if (out.dtype() == DType::bf16)
      packrat::dequantize_groups(codes.data<uint8_t>(), meta.data<uint8_t>(), g, out.data<bf16_t>(), walk);
    else
      packrat::dequantize_groups(codes.data<uint8_t>(), meta.data<uint8_t>(), g, out.data<float>(), walk);
  }
  void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, ActivationId fn,
                               bool from_output, const Tensor& grad, const Tensor& gx,
                               const CodecWalk& walk) override {
    // The host bodies take the codes' order as it lies.
    PACKRAT_CHECK(walk.channels == 0,
                  "dequantize_groups_apply: a blocked walk on the CPU (its store keeps two passes)");
    dequantize_groups_apply_on_host(codes.data<uint8_t>(), meta.data<uint8_t>(), g, fn, from_output,
                                    grad.data<float>(), gx.data<float>());
  }

  MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) override {
    const CodecWalk walk = mixed_walk_of(x, c.bucket_size, "quantize_mixed");
    if (x.dtype() == DType::bf16) return packrat::quantize_mixed(x.data<bf16_t>(), x.numel(), c, noise, walk);
    return packrat::quantize_mixed(x.data<float>(), x.numel(), c, noise, walk);
  }
  void dequantize_mixed(const MixedPacked& p, const Tensor& out) override {
    const CodecWalk walk = mixed_walk_of(out, p.bucket_size, "dequantize_mixed");
    if (out.dtype() == DType::bf16)
      packrat::dequantize_mixed(p, out.data<bf16_t>(), walk);
    else
      packrat::dequantize_mixed(p, out.data<float>(), walk);
  }
  void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                              const Tensor& gx) override {
    PACKRAT_CHECK(gx.layout() == Layout::Plain, "dequantize_mixed_apply: an NHWC gradient on the host ({})",
                  gx.describe());
    dequantize_mixed_apply_on_host(p, fn, from_output, grad.data<float>(), gx.data<float>());
  }

  void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y,
                     const Tensor& packed) override {
    if (src.dtype() == DType::bf16)
      packrat::fewbit_encode(c, fn, src.data<bf16_t>(), y.defined() ? y.data<bf16_t>() : nullptr, src.numel(),
                             packed.data<uint8_t>());
    else
      packrat::fewbit_encode(c, fn, src.raw(), dtype_size(src.dtype()), y.defined() ? y.data<float>() : nullptr,
                             src.numel(), packed.data<uint8_t>());
  }
  void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) override {
    packrat::fewbit_decode(c, packed.data<uint8_t>(), grad.defined() ? grad.data<float>() : nullptr,
                           out.data<float>(), out.numel());
  }

  void fp8_encode(const Tensor& x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, const Tensor& codes,
                  const Tensor& scales) override {
    fp8_encode_host(x.data<float>(), f, s, g, codes.data<uint8_t>(), scales.data<float>());
  }
  void fp8_decode(const Tensor& codes, const Tensor& scales, Fp8Format f, const Fp8Geometry& g,
                  const Tensor& out) override {
    fp8_decode_host(codes.data<uint8_t>(), scales.data<float>(), f, g, out.data<float>());
  }

  int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) override {
    return pack_codes_cpu(src, bits, packed.data<uint8_t>());
  }
  void unpack_codes(const Tensor& packed, int bits, const Tensor& out) override {
    unpack_codes_cpu(packed.data<uint8_t>(), bits, out);
  }
};

}  // namespace

CodecKernels& cpu_codecs() {
  static CpuCodecs* c = new CpuCodecs();  // never destroyed, like the backends
  return *c;
}

}  // namespace packrat
