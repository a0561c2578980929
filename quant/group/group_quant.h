#pragma once
// Per-group stochastic quantization (ActNN, GACT). A saved f32 tensor is cut into groups of G
// elements contiguous in its logical (plain NCHW) order, within each sample, within each channel
// plane, or over the flattened tensor (the CPU's blocked buffers are walked in that order: see
// CodecWalk; a GPU's NHWC buffers: see codec_order); each group keeps its minimum
// and its step (bf16 or f32) and one b-bit code per element, b in {1, 2, 3, 4, 8}:
//
//   u = (x - min) / step,  step = (max - min) / (2^b - 1)
//   code = floor(u) + [r < u - floor(u)],  r uniform in (0, 1)  (stochastic: E[code] = u)
//   x' = min + code * step
//
// Stored metadata is rounded outward (min down, step up) and the codes are computed from the
// stored values, so dequantization reproduces exactly the grid the codes were drawn on and
// stochastic rounding stays unbiased whatever the metadata precision.
//
// Randomness: the uniform of element e is a pure function of (seed, step, tensor, e) through
// a keyed counter-based hash (core/noise_hash.h; 16 bits per element, two elements a word; see
// rounding_noise16), so the noise of any tensor can be re-drawn while all others
// stay fixed (GACT's sensitivity estimate). The 2^-16 grid of the uniforms biases a rounding by
// at most 2^-17 of a step.
//
// Buffer format of one quantized tensor:
//   codes: every group starts on a byte boundary; within a group, element i occupies bits
//          [i*b, (i+1)*b) (quant/bits/bitpack.h's layout). Group bytes = packed_bytes(len, b).
//   meta:  per group {min, step}, two bf16 (4 bytes) or two f32 (8 bytes), group after group.
//
// The per-element helpers and the one-group reference (quantize_group / dequantize_group) below
// are inline and PACKRAT_HD: the CPU kernels (quant/cpu/group_quant_cpu.cpp) write exactly their bytes
// (tests/quant/codec_bitexact_test.cpp) and a CUDA kernel calls them, so a code written on one
// device decodes bit-identically on the other. The Tensor entry points dispatch by device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/half.h"    // f32_to_bf16, bf16_to_f32, f32_bits
#include "core/noise_hash.h"  // PACKRAT_HD, noise_key, noise_half
#include "quant/bits/bitpack.h"

namespace packrat {

// ---- configuration -----------------------------------------------------------------------

// PerPlane: groups never cross a channel plane (the H x W of one sample and channel of an
// (N, C, H, W) tensor, the D of one token of an (N, T, D) one): channels differ in offset and
// scale (a convolution's output before its batchnorm most of all), and a group spanning two
// takes the range of both. On the EfficientNet FMNIST config with GACT at 2 bits and groups of
// 64 it cuts the gradient's relative variance from 0.226 to 0.132 (trainer --gradient-fidelity 8)
// for 3% more saved bytes.
enum class Grouping : uint8_t { PerSample, Flat, PerPlane };
enum class MetaType : uint8_t { BF16, F32 };
enum class Rounding : uint8_t { Stochastic, Nearest };

constexpr bool group_bits_supported(int bits) { return bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8; }
PACKRAT_HD constexpr int meta_bytes_per_group(MetaType m) { return m == MetaType::BF16 ? 4 : 8; }
std::string_view grouping_name(Grouping g);
std::string_view meta_name(MetaType m);
std::string_view rounding_name(Rounding r);

struct GroupQuantConfig {
  int bits = 2;              // 1, 2, 3, 4 or 8
  int64_t group_size = 256;  // G >= 1
  Grouping grouping = Grouping::PerSample;
  MetaType meta = MetaType::BF16;
  Rounding rounding = Rounding::Stochastic;
  // Throws naming `where` for unsupported bits or group size.
  void check(std::string_view where) const;
};

// Where the groups of a tensor lie. The buffer is `spans` contiguous spans of `span_len`
// elements (samples for per-sample grouping, one span for flat); each span is cut into groups of
// G, the last one `tail_len` long (1..G).
struct GroupGeometry {
  int64_t numel = 0, spans = 0, span_len = 0, group_size = 1, groups_per_span = 0, tail_len = 0;
  int bits = 2;
  MetaType meta = MetaType::BF16;

  PACKRAT_HD int64_t groups() const { return spans * groups_per_span; }
  PACKRAT_HD int64_t full_group_bytes() const { return packed_bytes(group_size, bits); }
  PACKRAT_HD int64_t span_bytes() const {
    return (groups_per_span - 1) * full_group_bytes() + packed_bytes(tail_len, bits);
  }
  PACKRAT_HD int64_t code_bytes() const { return groups() == 0 ? 0 : spans * span_bytes(); }
  PACKRAT_HD int64_t meta_bytes() const { return groups() * meta_bytes_per_group(meta); }
  PACKRAT_HD int64_t total_bytes() const { return code_bytes() + meta_bytes(); }
  // Group g: first element, length, offset of its first code byte.
  PACKRAT_HD int64_t group_start(int64_t g) const {
    return (g / groups_per_span) * span_len + (g % groups_per_span) * group_size;
  }
  PACKRAT_HD int64_t group_len(int64_t g) const {
    return g % groups_per_span == groups_per_span - 1 ? tail_len : group_size;
  }
  PACKRAT_HD int64_t group_code_offset(int64_t g) const {
    return (g / groups_per_span) * span_bytes() + (g % groups_per_span) * full_group_bytes();
  }
  // Blocks of 8 elements (one packed block of `bits` bytes each) in the longest group.
  PACKRAT_HD int64_t blocks_per_group() const { return (group_size + 7) / 8; }
  // Group g's first element, length and first code byte with one division (the three calls
  // above take one each; a GPU divides 64-bit integers in software).
  struct Place {
    int64_t start, len, code_offset;
  };
  PACKRAT_HD Place place(int64_t g) const { return *cursor(g); }
  // Group i of span `span`.
  PACKRAT_HD Place place_in(int64_t span, int64_t i) const {
    return {span * span_len + i * group_size, i == groups_per_span - 1 ? tail_len : group_size,
            span * span_bytes() + i * full_group_bytes()};
  }
  // The places of groups g, g + 1, ... in turn, with one division for them all (a CPU kernel's
  // walk through its range of groups: groups of 32 values spent a tenth of the quantize waiting
  // for their division).
  struct Cursor {
    const GroupGeometry* geometry;
    int64_t span, i;
    PACKRAT_HD Place operator*() const { return geometry->place_in(span, i); }
    PACKRAT_HD void next() {
      if (++i == geometry->groups_per_span) i = 0, ++span;
    }
  };
  PACKRAT_HD Cursor cursor(int64_t g) const {
    const int64_t span = div_nonneg(g, groups_per_span);
    return {this, span, g - span * groups_per_span};
  }
  // a / b for a >= 0, b > 0: a 32-bit division when both fit.
  PACKRAT_HD static int64_t div_nonneg(int64_t a, int64_t b) {
    if (((a | b) >> 32) == 0) return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
    return a / b;
  }
};

// Geometry for a tensor of `numel` elements whose leading dimension is `samples` (ignored for
// flat grouping; per-sample grouping of a tensor with fewer than 2 dimensions is flat) and whose
// channel planes hold `plane` elements each (per-plane grouping; 0: none, grouped per sample).
// Per plane, a plane of L >= G elements is cut into ceil(L / G) groups of equal length (the last
// up to that length shorter), so that no group is a short remainder with a whole metadata record;
// planes smaller than G are grouped whole, G / L planes to a group, within each sample.
GroupGeometry group_geometry(int64_t numel, int64_t samples, const GroupQuantConfig& c, int64_t plane = 0);

class Shape;
class Tensor;

// The samples of x: its leading dimension (rank >= 2), else 1.
int64_t leading_samples(const Tensor& x);
// The elements of one channel plane of a tensor of this shape: the product of its dimensions after
// the second (rank >= 3), else 0.
int64_t channel_plane(const Shape& shape);
int64_t channel_plane(const Tensor& x);
// x's geometry under c: group_geometry(numel, leading_samples(x), c, channel_plane(x)).
GroupGeometry group_geometry_of(const Tensor& x, const GroupQuantConfig& c);

// How the codec walks a buffer. channels 0: element e of the geometry is element e of the buffer
// as it lies. Otherwise element e of the geometry is the one at plain (n, c, h, w) position e of a
// buffer that is channel-blocked (the CPU's nChw16c or nChw8c: channels a multiple of `block`,
// plane = H x W) or, with nhwc, NHWC (a GPU's), so that the groups are the plain tensor's although
// the channels lie interleaved (per-plane groups hold one channel each, and so do per-sample ones
// where a plane holds at least G, as ActNN groups an NCHW tensor); the codes are those of the
// plain tensor.
struct CodecWalk {
  int64_t channels = 0, plane = 0;  // channels 0: the buffer as it lies
  bool nhwc = false;                // with channels: NHWC, else channel-blocked
  int64_t block = 16;               // channel-blocked: the channels a block holds (16 or 8; C: NHWC on the CPU)
};
// NHWC (N, C, H, W) as the CPU's kernels walk it: channel-blocked with one block of all C channels
// (nChwCc, the same buffer), so that their blocked walks serve it.
CodecWalk nhwc_as_blocked(const Shape& s);
// How the codec reads x, whose geometry is g (group_geometry_of), so that the codes are those of
// the plain tensor under every grouping.
struct CodecOrder {
  // Plain order for a blocked tensor (the CPU's) and for an NHWC tensor (a GPU's) whose groups the
  // CUDA kernels take in that order (quant/group/nhwc_tile.h: groups and planes of up to 1024 values, the
  // tensor under 2^31 values); else as it lies.
  CodecWalk walk;
  // An NHWC tensor whose groups the kernels cannot stage (groups or planes of over 1024 values):
  // quantized from a plain copy, decoded into one.
  bool via_plain = false;
};
CodecOrder codec_order(const Tensor& x, const GroupGeometry& g);
// What the codec reads: x itself, or its plain copy (Workspace) where o.via_plain.
Tensor in_codec_order(const Tensor& x, const CodecOrder& o);

// ---- per-element helpers (host and device) -------------------------------------------------

// Randomness of one quantization: the noise's seed and stream (see quant_stream).
struct QuantNoise {
  uint64_t seed = 0, stream = 0;
};

// The noise stream of one saved tensor: (step, tensor index within the step).
PACKRAT_HD constexpr uint64_t quant_stream(uint64_t step, uint64_t tensor) { return (step << 20) ^ tensor; }

// The rounding uniform of element e, in (0, 1) on a 2^-16 grid centred in its bins, from the
// stream's 16-bit noise of e: half e % 2 of word e / 2 (noise_half), so that a walk along
// neighbouring elements takes one hash for two, whatever lanes it walks them in.
// (half + 0.5) / 2^16, built from its bits: 1 + (2 half + 1) / 2^17 has them as its mantissa, and
// taking 1 away is exact; on a GPU an int-to-float conversion runs at an eighth of the rate of
// these integer and float instructions.
PACKRAT_HD inline float uniform16(uint32_t half) {
  return f32_from_bits(0x3F800040u | ((half & 0xFFFFu) << 7)) - 1.0f;
}
PACKRAT_HD inline uint32_t rounding_noise16(uint64_t seed, uint64_t stream, uint64_t e) {
  return noise_half(noise_key(seed, stream), e);
}
PACKRAT_HD inline float rounding_uniform(uint64_t seed, uint64_t stream, uint64_t e) {
  return uniform16(rounding_noise16(seed, stream, e));
}

// 1/step, or 0 where step is 0 or so small that 1/step overflows (all codes 0 then).
PACKRAT_HD inline float safe_inverse(float step) {
  const float inv = 1.0f / step;
  return step > 0.0f && inv <= 3.0e38f ? inv : 0.0f;
}

// A group's stored metadata as f32: x' = min + code * step; inv_step = 1/step (0 when step is 0).
struct GroupParams {
  float min, step, inv_step;
};

// From the group's f32 range: min rounded down and step rounded up to the metadata precision,
// so that [min, min + levels*step] (dequantize_value's fused multiply-add) covers [mn, mx].
PACKRAT_HD inline GroupParams group_params(float mn, float mx, int bits, MetaType meta) {
  const float levels = static_cast<float>((1 << bits) - 1);
  GroupParams p;
  p.min = meta == MetaType::BF16 ? bf16_to_f32(f32_to_bf16_down(mn)) : mn;
  float step = (mx - p.min) / levels;
  // A NaN group's step: one NaN on every device (a GPU's arithmetic makes 0x7FFFFFFF, the CPU's
  // keeps the operand's payload), so that f32 metadata is the same bytes on both.
  if (f32_bits_nan(f32_bits(step))) step = f32_from_bits(0x7FC00000u);
  if (meta == MetaType::BF16) {
    step = bf16_to_f32(f32_to_bf16_up(step));
  } else if (step > 0.0f && std::fma(levels, step, p.min) < mx) {
    step = f32_from_bits(f32_bits(step) + 1);  // one ulp up so that the grid covers mx
  }
  p.step = step;
  p.inv_step = safe_inverse(step);
  return p;
}

// Writes / reads a group's metadata record (meta_bytes_per_group bytes at dst).
PACKRAT_HD inline void store_group_meta(const GroupParams& p, MetaType meta, uint8_t* dst) {
  if (meta == MetaType::BF16) {
    const uint16_t v[2] = {f32_to_bf16_down(p.min), f32_to_bf16_up(p.step)};  // exact: already bf16
    std::memcpy(dst, v, 4);
  } else {
    const float v[2] = {p.min, p.step};
    std::memcpy(dst, v, 8);
  }
}
// Its min and step only (inv_step 0): what dequantize_value needs.
PACKRAT_HD inline GroupParams load_group_range(const uint8_t* src, MetaType meta) {
  GroupParams p{0.0f, 0.0f, 0.0f};
  if (meta == MetaType::BF16) {
    uint16_t v[2];
    std::memcpy(v, src, 4);
    p.min = bf16_to_f32(v[0]);
    p.step = bf16_to_f32(v[1]);
  } else {
    float v[2];
    std::memcpy(v, src, 8);
    p.min = v[0];
    p.step = v[1];
  }
  return p;
}
PACKRAT_HD inline GroupParams load_group_meta(const uint8_t* src, MetaType meta) {
  GroupParams p = load_group_range(src, meta);
  p.inv_step = safe_inverse(p.step);
  return p;
}

// Code of one value: stochastic with uniform r in (0, 1), round-to-nearest (ties down) with
// r = 0.5. x must lie in the group's range; NaN gives code 0.
// (The CPU loops in quant/cpu/group_quant_cpu.cpp compute the same codes with AVX-512 where available.)
PACKRAT_HD inline uint32_t quantize_value(float x, const GroupParams& p, uint32_t levels, float r) {
  float u = (x - p.min) * p.inv_step;
  u = u > 0.0f ? u : 0.0f;  // and NaN: 0 (code 0, as below zero)
  const int32_t fl = static_cast<int32_t>(u);  // u is within the group's levels: no overflow
  const uint32_t code = static_cast<uint32_t>(fl) + (r < u - static_cast<float>(fl) ? 1u : 0u);
  return code < levels ? code : levels;
}
// One fused multiply-add, written out so that no compiler (gcc, nvcc) chooses differently.
PACKRAT_HD inline float dequantize_value(uint32_t code, const GroupParams& p) {
  return std::fma(static_cast<float>(code), p.step, p.min);
}

// Packs n codes (< 2^bits) starting on a byte boundary at dst, quant/bits/bitpack.h's layout;
// writes packed_bytes(n, bits) bytes.
PACKRAT_HD inline void pack_group_codes(const uint8_t* codes, int64_t n, int bits, uint8_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8, dst += bits) {
    uint64_t w = 0;
    for (int k = 0; k < 8; ++k) w |= block_put(codes[i + k], k, bits);
    store_block8(w, bits, dst);
  }
  if (i < n) {
    uint64_t w = 0;
    for (int k = 0; i + k < n; ++k) w |= block_put(codes[i + k], k, bits);
    store_block8(w, static_cast<int>(packed_bytes(n - i, bits)), dst);
  }
}
PACKRAT_HD inline void unpack_group_codes(const uint8_t* src, int64_t n, int bits, uint8_t* codes) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8, src += bits) {
    const uint64_t w = load_block8(src, bits);
    for (int k = 0; k < 8; ++k) codes[i + k] = static_cast<uint8_t>(block_code(w, k, bits));
  }
  if (i < n) {
    const uint64_t w = load_block8(src, bits, static_cast<int>(packed_bytes(n - i, bits)));
    for (int k = 0; i + k < n; ++k) codes[i + k] = static_cast<uint8_t>(block_code(w, k, bits));
  }
}

// ---- one block of 8 elements: what a GPU thread does ----------------------------------------

// The block word (block_put's layout) of n <= 8 values v, value k rounded with the uniform r[k]
// (0.5: to nearest): quantize_block8's arithmetic, for kernels that find the noise elsewhere.
PACKRAT_HD inline uint64_t quantize_block8_word(const float* v, int n, const GroupParams& p, int bits, const float* r) {
  const uint32_t levels = (1u << bits) - 1u;
  uint64_t w = 0;
  for (int k = 0; k < 8; ++k)  // a constant trip count: a GPU keeps v and r in registers
    if (k < n) w |= block_put(quantize_value(v[k], p, levels, r[k]), k, bits);
  return w;
}

// The elements in block `block` (elements [8 * block, 8 * block + 8)) of a run of len (a group, a
// bucket): 8, fewer for the last, 0 past it.
PACKRAT_HD inline int block8_len(int64_t len, int64_t block) {
  const int64_t left = len - 8 * block;
  return left <= 0 ? 0 : left < 8 ? static_cast<int>(left) : 8;
}

// Quantizes the elements [8 * block, 8 * block + 8) of a group of len values starting at x
// (clipped to len), whose first element has index e0 in its noise stream, into the block's
// `bits` bytes at group_codes + block * bits. The block must exist (8 * block < len).
PACKRAT_HD inline void quantize_block8(const float* x, int64_t len, int64_t block, uint64_t e0, const GroupParams& p,
                                       int bits, Rounding rounding, const QuantNoise& noise, uint8_t* group_codes) {
  const int64_t b = 8 * block;
  const int n = block8_len(len, block);
  float r[8];
  for (int k = 0; k < n; ++k)
    r[k] = rounding == Rounding::Stochastic ? rounding_uniform(noise.seed, noise.stream, e0 + b + k) : 0.5f;
  store_block8(quantize_block8_word(x + b, n, p, bits, r), static_cast<int>(packed_bytes(n, bits)),
               group_codes + block * bits);
}

// Dequantizes the same block of a group: out[8 * block ..] (clipped to len), out the group's first value.
PACKRAT_HD inline void dequantize_block8(const uint8_t* group_codes, int64_t len, int64_t block, const GroupParams& p,
                                         int bits, float* out) {
  const int64_t b = 8 * block;
  const int n = block8_len(len, block);
  const uint64_t w = load_block8(group_codes + block * bits, bits, static_cast<int>(packed_bytes(n, bits)));
  for (int k = 0; k < n; ++k) out[b + k] = dequantize_value(block_code(w, k, bits), p);
}

// len * (stored range)^2 / 4: the group's summed variance bound of stochastic rounding over S(b).
PACKRAT_HD inline double group_range_sq(const GroupParams& p, int64_t len, int bits) {
  const double range = static_cast<double>(p.step) * static_cast<double>((1u << bits) - 1u);
  return static_cast<double>(len) * range * range / 4.0;
}

// ---- one group, element by element: the reference of every kernel --------------------------

// Quantizes one group of len >= 1 values x[0..len) whose first element has index e0 in its
// noise stream (its noise is rounding_uniform(seed, stream, e0 + i)): the range (a plain
// min/max scan), the metadata record at meta_dst, and packed_bytes(len, bits) code bytes at
// code_dst, 8 codes (one block) at a time. Returns len * (stored range)^2 / 4 (see
// quantize_groups' group_range_sq).
PACKRAT_HD inline double quantize_group(const float* x, int64_t len, uint64_t e0, int bits, MetaType meta,
                                        Rounding rounding, const QuantNoise& noise, uint8_t* meta_dst,
                                        uint8_t* code_dst) {
  float mn = x[0], mx = x[0];
  for (int64_t i = 1; i < len; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  const GroupParams p = group_params(mn, mx, bits, meta);
  store_group_meta(p, meta, meta_dst);
  for (int64_t block = 0; 8 * block < len; ++block)
    quantize_block8(x, len, block, e0, p, bits, rounding, noise, code_dst);
  return group_range_sq(p, len, bits);
}

// Dequantizes one group written by quantize_group: out[0..len).
PACKRAT_HD inline void dequantize_group(const uint8_t* codes, const uint8_t* meta_src, int64_t len, int bits,
                                        MetaType meta, float* out) {
  const GroupParams p = load_group_meta(meta_src, meta);
  for (int64_t block = 0; 8 * block < len; ++block) dequantize_block8(codes, len, block, p, bits, out);
}

// ---- entry points: dispatched by the device of their tensors ---------------------------------

// Quantizes x (g.numel f32, walked as `walk` says) into codes (g.code_bytes(),) u8 and meta
// (g.meta_bytes(),) u8 on x's device. CPU: the kernel below; a GPU: quant/cuda/group_quant_cuda.cu (the
// variance bounds, when asked for, are copied to the host); the emulated GPU of the tests: the
// CPU kernel (quant/codec/codec_kernels.h).
// `walk` (codec_order): channel-blocked walks on the CPU (and the emulated GPU of the tests, which
// runs the CPU's kernels), NHWC walks on a GPU.
void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq = nullptr,
                     CodecWalk walk = {});
// Dequantizes into out (g.numel f32, any shape) on the codes' device, walked as `walk` says.
void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                       CodecWalk walk = {});
// An activation's backward from its codes in one pass: gx = grad * f'(x), x the dequantized values
// (y = f(x) where from_output), never stored (quant/codec/apply_derivative_sink.h). grad and gx: g.numel
// f32 on the codes' device, walked as `walk` says (an NHWC walk on a GPU only). The bits of
// dequantize_groups followed by the backend's pointwise_backward.
void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, ActivationId fn,
                             bool from_output, const Tensor& grad, const Tensor& gx, CodecWalk walk = {});

// ---- the CPU kernels (quant/cpu/group_quant_cpu.cpp), on host pointers ----------------------------------

// One pass: for every group, its range, its metadata, its codes, packed (the bytes of
// quantize_group). x holds g.numel floats; codes holds g.code_bytes(), meta g.meta_bytes().
// Parallel over groups.
// group_range_sq, when given, receives per group len * (stored range)^2 / 4: the group's summed
// per-element variance bound of stochastic rounding divided by S(b) = 1/(2^b-1)^2, for
// ActNN's analytic sensitivity.
// With a walk, each tile of a channel block is first transposed to plain order (still one pass
// over x).
void quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, std::vector<double>* group_range_sq = nullptr,
                     CodecWalk walk = {});
// The same from bf16 values (autocast's saved tensors), read as they are: the codes and metadata of
// their f32 values, with no f32 copy of x. Groups of up to kMaxStagedGroup values (a plain
// buffer's are converted a window of that many at a time into a thread's buffer).
constexpr int64_t kMaxStagedGroup = 16 * 1024;
void quantize_groups(const bf16_t* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, std::vector<double>* group_range_sq = nullptr,
                     CodecWalk walk = {});
// One pass: unpack and dequantize every group into out (g.numel floats; with a walk,
// transposed back to the blocked layout tile by tile).
void dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out,
                       CodecWalk walk = {});
// The same into bf16, each value rounded as Tensor::to(bf16) rounds the f32 one.
void dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, bf16_t* out,
                       CodecWalk walk = {});

}  // namespace packrat
