#pragma once
// 8-bit floating point, COAT's activation format: the per-element arithmetic of the fp8 codec,
// PACKRAT_HD and CUDA-free, so that the CPU kernels (quant/cpu/fp8_codec_cpu.cpp) and the CUDA
// kernels (quant/cuda/fp8_codec_cuda.cu) run the same bodies and write the same bytes.
//
// Formats (sign, exponent, mantissa bits; bias):
//   e4m3  OCP / NVIDIA FP8 E4M3FN: 1.4.3, bias 7, no infinities, max 448 (S.1111.110),
//         NaN S.1111.111, smallest subnormal 2^-9
//   e5m2  1.5.2, bias 15, IEEE-like: inf S.11111.00, NaN S.11111.{01,10,11}, max 57344
//         (S.11110.11), smallest subnormal 2^-16
// Conversion from f32 (f32_to_fp8): round to nearest, ties to even, subnormals kept; finite
// values beyond the largest finite one saturate to it (the scaled casts of COAT and
// transformer-engine: the scale makes overflow a rounding matter, not an error); NaN -> S.1111111
// (the sign kept); +-inf -> +-inf in e5m2, +-max (448) in e4m3, which has no infinity. Done in
// integer arithmetic on the f32's bits, branch-free (selects), so it does not depend on the FPU's
// rounding mode or flush-to-zero, and vectorises.
//
// Scaling: codes = fp8(x / scale), x' = fp8_to_f32(code) * scale, scale = amax / fmax over a
// tensor (per_tensor) or over each group of G consecutive elements of the buffer as it lies
// (per_group); amax is the largest |x| over the finite elements (NaN and inf do not set the
// scale), and an amax of 0 (or one so small that amax / fmax is 0) takes scale 1. x / scale and
// code * scale are single IEEE operations (correctly rounded on both devices: nvcc divides
// IEEE-exactly without --use_fast_math, and a lone product leaves nothing to contract into an
// FMA), and the max of a set does not depend on the order it is taken in, so the scales too are
// identical on every device.
#include <cstdint>
#include <type_traits>

#include "core/half.h"  // f32_bits, f32_from_bits
#include "core/hd.h"

namespace packrat {

enum class Fp8Format : uint8_t { E4M3, E5M2 };
enum class Fp8Scale : uint8_t { PerTensor, PerGroup };

// Largest finite value of the format.
PACKRAT_HD constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }

namespace fp8_detail {

// The magnitude code (7 bits) of a finite or infinite f32 magnitude `a` (its bits, sign cleared)
// for a format of M mantissa bits and bias B, saturated at max_code.
template <int M, int B>
PACKRAT_HD inline uint32_t magnitude_code(uint32_t a, uint32_t max_code) {
  constexpr int kShift = 23 - M;  // f32 mantissa bits dropped for a normal result
  // Normal: round the f32 at M mantissa bits (a carry moves into the exponent as it should),
  // then rebias the exponent. Below the format's normal range this underflows (wraps): unused.
  const uint32_t rounded = a + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u);
  const uint32_t normal = (rounded >> kShift) - (static_cast<uint32_t>(127 - B) << M);
  // Subnormal: the significand (implicit bit included) shifted to units of 2^(1-B-M), rounded to
  // nearest even; a result of 2^M is the smallest normal code, as it should be. An f32 subnormal
  // (exponent field 0) shifts by 31, to 0: far below the format's smallest subnormal.
  const uint32_t e = a >> 23;                                  // f32 biased exponent
  const uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;        // 1.m as a 24-bit integer
  const uint32_t need = static_cast<uint32_t>(kShift + (127 - B + 1)) - e;  // shift to subnormal units (> kShift here)
  const uint32_t s = need < 31u ? need : 31u;
  const uint32_t q = sig >> s, rem = sig & ((1u << s) - 1u), half = 1u << (s - 1u);
  const uint32_t sub = q + (static_cast<uint32_t>(rem > half) | (static_cast<uint32_t>(rem == half) & q & 1u));
  const uint32_t is_normal = static_cast<uint32_t>(e >= static_cast<uint32_t>(127 - B + 1));
  const uint32_t code = is_normal ? normal : sub;
  // Saturation: anything above max (a rounding up past it, a huge value, inf) is max. (In f32
  // bits: a > 0x7F800000 is a NaN, handled by the caller.) Bitwise, not && / ||: no branches, so
  // the CPU's loops vectorise.
  const uint32_t over = is_normal & (static_cast<uint32_t>(a >= 0x7F800000u) | static_cast<uint32_t>(code > max_code));
  return over ? max_code : code;
}

}  // namespace fp8_detail

// f32 -> E4M3FN: RNE, subnormals, saturating (inf -> +-448), NaN -> S.1111.111.
PACKRAT_HD inline uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  const uint32_t mag = fp8_detail::magnitude_code<3, 7>(a, 0x7Eu);
  return static_cast<uint8_t>(sign | (a > 0x7F800000u ? 0x7Fu : mag));
}

// f32 -> E5M2: RNE, subnormals, finite values saturate at +-57344, +-inf stays +-inf (S.11111.00),
// NaN -> S.11111.11.
PACKRAT_HD inline uint8_t f32_to_e5m2(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  const uint32_t mag = fp8_detail::magnitude_code<2, 15>(a, 0x7Bu);
  const uint32_t special = a > 0x7F800000u ? 0x7Fu : 0x7Cu;
  return static_cast<uint8_t>(sign | (a >= 0x7F800000u ? special : mag));
}

// E4M3FN -> f32, exact.
PACKRAT_HD inline float e4m3_to_f32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24, e = (c >> 3) & 0xFu, m = c & 0x7u;
  const uint32_t normal = sign | ((e + (127 - 7)) << 23) | (m << 20);
  // Subnormal m * 2^-9: exact in f32 (m < 8).
  const uint32_t sub = sign | f32_bits(static_cast<float>(m) * 0.001953125f);
  const uint32_t nan = sign | 0x7FC00000u;
  return f32_from_bits((c & 0x7Fu) == 0x7Fu ? nan : e == 0u ? sub : normal);
}

// E5M2 -> f32, exact (inf and NaN as such).
PACKRAT_HD inline float e5m2_to_f32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24, e = (c >> 2) & 0x1Fu, m = c & 0x3u;
  const uint32_t normal = sign | ((e + (127 - 15)) << 23) | (m << 21);
  const uint32_t sub = sign | f32_bits(static_cast<float>(m) * 0.0000152587890625f);  // m * 2^-16
  const uint32_t special = sign | (m == 0u ? 0x7F800000u : 0x7FC00000u);
  return f32_from_bits(e == 0x1Fu ? special : e == 0u ? sub : normal);
}

template <Fp8Format F>
PACKRAT_HD inline uint8_t f32_to_fp8(float x) {
  if constexpr (F == Fp8Format::E4M3)
    return f32_to_e4m3(x);
  else
    return f32_to_e5m2(x);
}
template <Fp8Format F>
PACKRAT_HD inline float fp8_to_f32(uint8_t c) {
  if constexpr (F == Fp8Format::E4M3)
    return e4m3_to_f32(c);
  else
    return e5m2_to_f32(c);
}

// |x| of a finite x; 0 for NaN and +-inf (they do not set a scale). Branch-free.
PACKRAT_HD inline float fp8_amax_term(float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  return f32_from_bits(a < 0x7F800000u ? a : 0u);
}
// The same as bits: non-negative floats order as their bits, so a max over these is the amax's
// bits (an integer max reduction, which vectorises where a float one does not).
PACKRAT_HD inline uint32_t fp8_amax_term_bits(float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}

// The scale of a set whose largest finite |x| is amax (>= 0): amax / fmax, or 1 where that is 0.
PACKRAT_HD inline float fp8_scale_of(float amax, Fp8Format f) {
  const float s = amax / fp8_max(f);
  return s > 0.0f ? s : 1.0f;
}

// ---- the kernels' bodies (the CPU kernels loop over them, the CUDA kernels launch them) ----------

// Where the scales of a tensor of n elements lie: group g = elements [g * G, min(n, (g + 1) * G)),
// scale g. per_tensor is one group of all n (G = n).
struct Fp8Geometry {
  int64_t numel = 0, group_size = 1;  // G >= 1
  PACKRAT_HD int64_t groups() const { return numel == 0 ? 0 : (numel + group_size - 1) / group_size; }
};

// The largest finite |x| of the elements [begin, end) of x: one lane's part of a group's amax, or
// one chunk's of a tensor's (the max of the parts, in any order, is the whole's).
PACKRAT_HD inline float fp8_amax_strided(const float* x, int64_t begin, int64_t end, int64_t stride) {
  float m = 0.0f;
  for (int64_t i = begin; i < end; i += stride) {
    const float t = fp8_amax_term(x[i]);
    m = t > m ? t : m;
  }
  return m;
}

// codes[i] = fp8(x[i] / scale) for i in [begin, end) step `stride`.
template <Fp8Format F>
PACKRAT_HD inline void fp8_encode_strided(const float* x, int64_t begin, int64_t end, int64_t stride, float scale,
                                          uint8_t* codes) {
  for (int64_t i = begin; i < end; i += stride) codes[i] = f32_to_fp8<F>(x[i] / scale);
}

// One group of a per-group encode, as lane `lane` of `lanes` takes it (elements lane, lane + lanes,
// ... of the group, so that a warp's lanes read consecutive floats): lane_amax, then, with the
// group's amax (the max over its lanes), encode writes the lane's codes and lane 0 the scale.
template <Fp8Format F>
struct Fp8GroupEncodeBody {
  const float* x;
  Fp8Geometry g;
  uint8_t* codes;  // (numel,)
  float* scales;   // (groups,)
  PACKRAT_HD int64_t begin(int64_t group) const { return group * g.group_size; }
  PACKRAT_HD int64_t end(int64_t group) const {
    const int64_t e = (group + 1) * g.group_size;
    return e < g.numel ? e : g.numel;
  }
  PACKRAT_HD float lane_amax(int64_t group, int lane, int lanes) const {
    return fp8_amax_strided(x, begin(group) + lane, end(group), lanes);
  }
  PACKRAT_HD void encode(int64_t group, int lane, int lanes, float amax) const {
    const float scale = fp8_scale_of(amax, F);
    if (lane == 0) scales[group] = scale;
    fp8_encode_strided<F>(x, begin(group) + lane, end(group), lanes, scale, codes);
  }
};

// Lanes a group of G takes on a GPU (a power of two up to a warp, about 4 elements a lane).
PACKRAT_HD inline int fp8_group_lanes(int64_t group_size) {
  int lanes = 1;
  while (lanes < 32 && 4 * static_cast<int64_t>(lanes) < group_size) lanes *= 2;
  return lanes;
}

// Per-tensor encode of elements [4i, 4i + 4): with the tensor's amax (amax[0]) known, the scale,
// and the codes of one quad; index 0 writes the scale.
template <Fp8Format F>
struct Fp8TensorEncodeBody {
  const float* x;
  int64_t n;
  const float* amax;  // (1,): the tensor's amax
  uint8_t* codes;     // (n,)
  float* scale;       // (1,)
  PACKRAT_HD void operator()(int64_t quad) const {
    const float s = fp8_scale_of(amax[0], F);
    if (quad == 0) scale[0] = s;
    const int64_t b = 4 * quad, e = b + 4 < n ? b + 4 : n;
    fp8_encode_strided<F>(x, b, e, 1, s, codes);
  }
};

// Decode of elements [4i, 4i + 4): out = fp8_to_f32(code) * scale of its group.
template <Fp8Format F>
struct Fp8DecodeBody {
  const uint8_t* codes;  // (numel,)
  const float* scales;   // (groups,)
  Fp8Geometry g;
  float* out;  // (numel,)
  PACKRAT_HD void operator()(int64_t quad) const {
    const int64_t b = 4 * quad, e = b + 4 < g.numel ? b + 4 : g.numel;
    int64_t group = b / g.group_size, group_end = (group + 1) * g.group_size;
    for (int64_t i = b; i < e; ++i) {
      if (i >= group_end) {
        ++group;
        group_end += g.group_size;
      }
      out[i] = fp8_to_f32<F>(codes[i]) * scales[group];
    }
  }
};

// f(format) with the format as a compile-time constant.
template <class Fn>
inline decltype(auto) with_fp8_format(Fp8Format f, Fn&& fn) {
  if (f == Fp8Format::E4M3) return fn(std::integral_constant<Fp8Format, Fp8Format::E4M3>{});
  return fn(std::integral_constant<Fp8Format, Fp8Format::E5M2>{});
}

}  // namespace packrat
