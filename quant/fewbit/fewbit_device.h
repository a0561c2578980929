#pragma once
// The few-bit codec's GPU work, one quad of 4 elements per thread: the bodies its CUDA kernels
// (quant/cuda/fewbit_codec_cuda.cu) run, CUDA-free so that the CPU tests run them too (a host loop over the
// threads, the encode's pair exchange included) against the CPU kernels, byte for byte. A block
// of 8 codes fills exactly `bits` bytes, so the blocks of a tensor are written independently
// (the last one may be partial).
#include <cstdint>

#include "core/pointwise_math.h"
#include "quant/bits/bitpack.h"
#include "quant/bits/block_io.h"
#include "quant/fewbit/fewbit_codec.h"

namespace packrat {

// For encodes that need no activation (Table or Mask codes without y).
struct NoActivation {
  static constexpr bool kFromOutput = false;
  PACKRAT_HD static float f(float x) { return x; }
  PACKRAT_HD static float df(float) { return 0.0f; }
};

// One thread per quad of 4 elements (thread t: elements 4t .. 4t + 3, clipped to n), so that
// consecutive threads read and write consecutive 16 bytes (float4 where aligned): one thread per
// block of 8 read and wrote 8 floats at a 32-byte stride between lanes. A block of 8 codes is two
// quads: the even thread of a pair stores it, from its codes and its partner's (a shuffle on a
// GPU; FewbitEncodeQuads::store_pair).

// Encode. codes(t): the codes of quad t (code k at bits [k B, (k + 1) B)), y = A::f(src) there
// when y is given. Table: the interval of src in the lookup table; Step: A's f' (from the output
// when c.from_output) equals c.step_hi; Mask: src (u8) is non-zero.
template <class A, int B>
struct FewbitEncodeQuads {
  FewbitCoder c;
  const void* src;  // (n) f32 (Table, Step) or u8 (Mask)
  float* y;         // (n) or null
  int64_t n;
  uint8_t* packed;  // (packed_bytes(n, B))

  PACKRAT_HD uint32_t code_of(float v) const {
    if (c.kind == FewbitKind::Table) return fewbit_index<(1 << B) - 1>(c.lut, v);
    float d;
    if constexpr (A::kFromOutput) {
      d = c.from_output ? A::df_from_output(v) : A::df(v);
    } else {
      d = A::df(v);
    }
    return d == c.step_hi ? 1u : 0u;
  }

  PACKRAT_HD int quad_len(int64_t t) const { return n - 4 * t < 4 ? static_cast<int>(n - 4 * t) : 4; }

  // t < quads(n).
  PACKRAT_HD uint32_t codes(int64_t t) const {
    const int m = quad_len(t);
    uint32_t w = 0;
    if (c.kind == FewbitKind::Mask) {
      const uint64_t bytes = load_bytes_wide(static_cast<const uint8_t*>(src) + 4 * t, m);
      for (int k = 0; k < 4; ++k)
        if (k < m) w |= ((bytes >> (8 * k)) & 0xFFu) != 0 ? 1u << (k * B) : 0u;
      return w;
    }
    float v[4] = {};
    load_floats4(static_cast<const float*>(src) + 4 * t, m, v);
    float fy[4] = {};
    for (int k = 0; k < 4; ++k)  // a constant trip count: v and fy stay in registers
      if (k < m) {
        w |= code_of(v[k]) << (k * B);
        if (y) fy[k] = A::f(v[k]);
      }
    if (y) store_floats4(fy, m, y + 4 * t);
    return w;
  }

  // Even t: block t / 2 from quad t's codes and quad t + 1's (0 past n).
  PACKRAT_HD void store_pair(int64_t t, uint32_t mine, uint32_t next) const {
    const int64_t blk = t / 2, left = n - 8 * blk;
    const int count = left < 8 ? static_cast<int>(left) : 8;
    const uint64_t w = static_cast<uint64_t>(mine) | static_cast<uint64_t>(next) << (4 * B);
    store_bytes_wide(w, static_cast<int>(packed_bytes(count, B)), packed + blk * B);
  }
};

// levels[code] as a chain of selects over constant indices (J = 1 .. NL - 1): a GPU keeps an
// array of kernel parameters indexed at run time in local memory.
template <int J, int NL>
PACKRAT_HD inline float select_level(const float* levels, uint32_t code, float v) {
  if constexpr (J == NL) {
    return v;
  } else {
    return select_level<J + 1, NL>(levels, code, code == static_cast<uint32_t>(J) ? levels[J] : v);
  }
}
template <int B>
PACKRAT_HD inline float level_of(const float* levels, uint32_t code) {
  return select_level<1, (1 << B)>(levels, code, levels[0]);
}

// Decode, thread t: out = fewbit_apply(code, grad) for quad t's elements, or with grad null
// out = level[code].
template <int B>
struct FewbitDecodeQuads {
  FewbitKind kind;
  float levels[1 << B];  // (2^B)
  const uint8_t* packed;
  const float* grad;  // (n) or null
  float* out;         // (n)
  int64_t n;

  PACKRAT_HD void operator()(int64_t t) const {
    const int m = n - 4 * t < 4 ? static_cast<int>(n - 4 * t) : 4;
    const uint32_t c = load_quad_codes(packed, n, t, B);
    float g[4] = {}, v[4] = {};
    if (grad) load_floats4(grad + 4 * t, m, g);
    for (int k = 0; k < 4; ++k) {
      const uint32_t code = (c >> (k * B)) & ((1u << B) - 1u);
      const float level = level_of<B>(levels, code);
      // fewbit_apply's arithmetic, with the level selected above
      v[k] = !grad ? level : kind == FewbitKind::Mask ? (code ? g[k] : 0.0f) : g[k] * level;
    }
    store_floats4(v, m, out + 4 * t);
  }
};

// Quads of n elements.
PACKRAT_HD inline int64_t fewbit_quads(int64_t n) { return (n + 3) / 4; }

}  // namespace packrat
