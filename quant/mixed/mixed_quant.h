#pragma once
// Mixed-precision per-bucket quantization (the stochastic mixed-precision thesis, ch. 4 and 5).
// A saved f32 tensor is cut into buckets of `bucket_size` contiguous elements of its logical
// (plain NCHW) order, the thesis's contiguous chunks of the activation, whatever its layout (see
// mixed_codec_order), the last one a tail; each bucket independently takes the higher width `mix`
// with probability `mix_prob` and the base width otherwise (or one draw for the whole tensor, the
// thesis's global variant; with bucket_size >= numel and the max-abs rule that is exactly its
// GlobalStochActQuant, listing 5.5), and is quantized on its own scale:
//
//   affine (eq. 5.3.1, 2^b levels):  step = (max - min) / (2^b - 1),  code = round(u), u = (x - min) / step
//                                     x' = min + code * step              codes 0 .. 2^b - 1, b bits
//   sign-magnitude (listing 5.1, L levels): s = max|x| or ||x||_2 of the bucket,
//                                     m = round(|x| / s * L),  code = L + sign(x) m
//                                     x' = (code - L) * s / L            codes 0 .. 2L, ceil(log2(2L+1)) bits
//
// with round = unbiased stochastic rounding (floor + Bernoulli(frac)) or, for the deterministic
// baseline, round-to-nearest. The thesis maps b bits to L = 2^b levels for the sign-magnitude
// rule, whose 2L + 1 codes then really take b + 2 bits each (2 bits: 9 codes, 4 bits): that is
// what is held and reported. Levels can also be given directly, e.g. L = 1 (ternary, 2 bits).
//
// The affine rule keeps the bucket minimum as its (real-valued) zero point, as per-group
// quantization does (quant/group/group_quant.h, whose metadata rounding, per-element quantizer,
// packing and rounding noise this file reuses): the thesis's integer zero point z = round(-min/s)
// shifts the grid by up to half a step and clips the bucket's extremes, which biases them.
//
// Buffer format of one quantized tensor (all in packrat Tensors, see MixedPacked):
//   codes: bucket after bucket, each starting on a byte boundary and packed at its code bits
//          (quant/bits/bitpack.h's layout). Widths above 8 bits: the bucket's low bytes (len bytes),
//          then its high (bits - 8)-bit parts packed: packed_bytes(len, bits) bytes in all.
//   meta:  per bucket, affine {min, step} (2 bf16 or 2 f32), sign-magnitude {s} (1 bf16 or f32).
//   flags: one bit per bucket (1 = mix width), packed, held only when a tensor's buckets do not
//          all take the same width; a uniform choice (per-tensor decision) is one host-side bit.
// The bucket code offsets are recomputed from the flags when loading: nothing else is stored.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/tensor.h"
#include "quant/mixed/mixed_kernel_bodies.h"  // the config, geometry, per-element helpers and one-bucket reference

namespace packrat {

std::string_view scale_rule_name(ScaleRule s);
std::string_view mix_decision_name(MixDecision d);
// L levels of the sign-magnitude rule (codes 0 .. 2L); its nominal label is ceil(log2 L).
BucketWidth sign_magnitude_width(uint32_t levels);
// The width for nominal `bits` under a scale rule (sign-magnitude: L = 2^bits).
BucketWidth width_for_bits(ScaleRule s, int bits);

BucketGeometry bucket_geometry(int64_t numel, int64_t bucket_size);

// One quantized tensor. The Tensors are allocated under the caller's TagScope.
struct MixedPacked {
  int64_t numel = 0;
  int64_t bucket_size = 1;
  BucketWidth base, mix;
  ScaleRule scale = ScaleRule::Affine;
  MetaType meta = MetaType::BF16;
  int64_t mix_buckets = 0;      // buckets that took the mix width
  bool uniform = true;          // every bucket took the same width (no flags held)
  bool uniform_is_mix = false;  // that width, when uniform
  Tensor codes;                 // (code bytes,) u8
  Tensor meta_data;             // (buckets * bucket_meta_bytes,) u8
  Tensor flags;                 // (packed_bytes(buckets, 1),) u8, or undefined when uniform

  BucketGeometry geometry() const { return bucket_geometry(numel, bucket_size); }
  // Bytes held, as the allocator counts them.
  int64_t bytes() const;
  // Bits per element of the codes alone.
  double code_bits_per_element() const;
};

// The bytes one quantized tensor holds when its buckets took the widths in `flags` (buckets,)
// u8 0/1: codes, metadata, and the packed flags unless all are equal. The formula the
// allocator's count must equal.
int64_t mixed_bytes_formula(const BucketGeometry& g, const MixedQuantConfig& c, const std::vector<uint8_t>& flags);

// The rounding noise of whole 128-element blocks (rounding_noise16's: 64 words a block), computed
// a SIMD register of words at a time and kept while the next elements fall in the same block. For
// the widths and rules per-group quantization does not cover.
class RoundingNoise {
 public:
  explicit RoundingNoise(const QuantNoise& noise) : key_(noise_key(noise.seed, noise.stream)) {}
  // out[i] = rounding_noise16(seed, stream, e0 + i), i < n.
  void fill(int64_t e0, int64_t n, uint16_t* out);

 private:
  NoiseKey key_;
  int64_t block_ = -1;
  alignas(64) uint16_t values_[128];  // (128,) the noise of block_
};

// flags[g] = 1 where bucket g takes the mix width (g < buckets): per bucket, u_g < mix_prob;
// per tensor, one draw u_0 < mix_prob for all. `noise.stream` is the quantization stream.
void decide_buckets(const BucketGeometry& g, const MixedQuantConfig& c, const QuantNoise& noise, uint8_t* flags);

// ---- entry points: dispatched by the device of their tensors -------------------------------

// The codes follow the tensor's logical (plain NCHW) order. How the entry points walk a tensor of
// this shape and layout on device d in that order (group_quant.h's CodecOrder): a plain one as it
// lies; on the CPU a blocked one through its channel blocks' tiles; on a GPU an NHWC one whose
// buckets the kernels stage (quant/mixed/nhwc_buckets.h: buckets and planes of up to 1024 values). Any
// other is via_plain: the caller hands its plain copy (quant/mixed/mixed_store.cpp).
CodecOrder mixed_codec_order(const Shape& shape, Layout layout, Device d, int64_t bucket_size);
// Quantizes x (any shape, f32, a layout mixed_codec_order walks); the result's Tensors on x's device
// under the current TagScope. CPU: the kernel below. A GPU: the CUDA kernels
// (quant/cuda/mixed_quant_cuda.cu), the same bytes; with per-bucket decisions the host reads back the code
// size (one synchronising 16-byte copy) to allocate the codes. A build without CUDA: packrat::Error.
MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise);
// Dequantizes into out (p.numel f32, any shape, a layout mixed_codec_order walks), on the codes' device:
// every buffer of p and out on one device, else packrat::Error.
void dequantize_mixed(const MixedPacked& p, const Tensor& out);
// An activation's backward from the codes in one pass: gx = grad * f'(x), x the dequantized values
// (y = f(x) where from_output), never stored (DequantizeBucketQuadsBody with
// quant/codec/apply_derivative_sink.h's sink). grad and gx: p.numel f32 on the codes' device, of one
// layout: plain (the codes' logical order), or on a GPU NHWC where mixed_codec_order walks it. The
// floats of dequantize_mixed followed by the backend's pointwise_backward. On the host the bodies
// run bucket by bucket, a test seam: the CPU store keeps its two vectorised passes, 10x faster
// than these scalar bodies on the 2-core machine (packrat_bench
// --benchmark_filter=MixedQuant_ApplyDerivative). A GPU runs them as dequantize_mixed does.
void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                            const Tensor& gx);

// Where each bucket's codes start when its width is what `flags` says: (buckets + 1,) byte
// offsets, the last one the code size (the exclusive scan a GPU makes with CUB).
std::vector<int64_t> bucket_code_offsets(const BucketGeometry& g, const BucketWidth& base, const BucketWidth& mix,
                                         const BucketFlags& flags);

// The format fields of a quantized tensor (numel, bucket size, widths, scale rule, metadata type),
// before its buffers (mixed_quant.cpp).
MixedPacked mixed_packed_header(int64_t numel, const MixedQuantConfig& c);
// What the kernels read of a quantized tensor's format.
MixedFormat mixed_format_of(const MixedPacked& p);
// The kernels' walk of t on its device (mixed_codec_order), or packrat::Error naming `where` for
// a layout they do not walk there.
CodecWalk mixed_walk_of(const Tensor& t, int64_t bucket_size, const char* where);

// ---- the CPU kernels (quant/cpu/mixed_quant_cpu.cpp), on host pointers ------------------------------

// Quantizes x (numel floats, in the order of walk: the buffer as it lies, or a blocked buffer in
// plain order) in one parallel pass over the buckets (the bytes of quantize_bucket_ref, bucket by
// bucket, with the widths of bucket_takes_mix).
// The widths are chosen by decide_buckets with the same noise; Tensors under the current TagScope.
// Affine buckets at 1, 2, 3, 4 or 8 bits are quantized by a fused kernel built from per-group
// quantization's SIMD pieces (quant/cpu/group_quant_simd.h: noise, range, packing) and dequantized by
// dequantize_groups; the other widths and the sign-magnitude rules by this file's own loops.
MixedPacked quantize_mixed(const float* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise,
                           const CodecWalk& walk = {});
// bf16 values (autocast's saved tensors, read as they lie): the codes of their f32 values.
MixedPacked quantize_mixed(const bf16_t* x, int64_t numel, const MixedQuantConfig& c, const QuantNoise& noise,
                           const CodecWalk& walk = {});
// Dequantizes into out (p.numel floats, in the order of walk); into bf16, the f32 values rounded as
// Tensor::to rounds them.
void dequantize_mixed(const MixedPacked& p, float* out, const CodecWalk& walk = {});
void dequantize_mixed(const MixedPacked& p, bf16_t* out, const CodecWalk& walk = {});

}  // namespace packrat
