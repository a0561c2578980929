#pragma once
// Philox-4x32-10 on SIMD lanes, bit-identical to Philox4x32::generate (core/philox.h): 16 counters
// at once in AVX-512 registers (philox16, philox_blocks), one or two blocks of 16 through AVX2
// registers (philox_lanes), or 16 in plain C++ (philox_lanes16). Used by dropout's masks
// (core/cpu/cpu_backend_random.cpp) and the mixed codec's bucket decisions; the quantizers'
// rounding noise is core/cpu/noise_hash_simd.h's. Internal to the CPU kernels: it includes
// immintrin.h.
#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/philox.h"

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers) wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::simd {

// Lanes of 32-bit words for Philox with AVX2 (AVX-512's philox_blocks below holds them in 64-bit
// lanes): U32x8, with broadcast, xor, and the hi and lo 32 bits of the 32x32-bit products a * m
// lane by lane (even lanes' products and odd lanes', blended).
#if defined(__AVX2__) && !defined(__AVX512F__)
struct U32x8 {
  __m256i v;
  static U32x8 set1(uint32_t x) { return {_mm256_set1_epi32(static_cast<int>(x))}; }
  friend U32x8 operator^(U32x8 a, U32x8 b) { return {_mm256_xor_si256(a.v, b.v)}; }
  static void mulhilo(U32x8 a, U32x8 m, U32x8& hi, U32x8& lo) {
    const __m256i even = _mm256_mul_epu32(a.v, m.v);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a.v, 32), m.v);
    hi = {_mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA)};
    lo = {_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA)};
  }
};
#endif

// Philox-4x32-10's ten rounds on the state words c[h][0..3] of V's lanes (Philox4x32::generate's),
// H independent sets of lanes whose chains interleave: a round's products wait on the previous
// round's, so one set alone leaves the multiplier idle (two blocks of 16 counters at once made the
// noise in about 0.7x the time of one after the other, AVX2, Zen 3).
template <class V, int H>
inline void philox_rounds(uint64_t seed, V (&c)[H][4]) {
  const V m0 = V::set1(Philox4x32::kMul0), m1 = V::set1(Philox4x32::kMul1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const V vk0 = V::set1(k0), vk1 = V::set1(k1);
    for (int h = 0; h < H; ++h) {
      V hi0, lo0, hi1, lo1;
      V::mulhilo(c[h][0], m0, hi0, lo0);
      V::mulhilo(c[h][2], m1, hi1, lo1);
      c[h][0] = hi1 ^ c[h][1] ^ vk0;
      c[h][1] = lo1;
      c[h][2] = hi0 ^ c[h][3] ^ vk1;
      c[h][3] = lo0;
    }
    k0 += Philox4x32::kWeyl0;
    k1 += Philox4x32::kWeyl1;
  }
}

#if defined(__AVX512F__)
// Philox-4x32-10 of R registers of 8 counters each, one a 64-bit lane of counters[r]: state word k
// of lane l's counter in the low half of 64-bit lane l of words[k][r]; the high halves are garbage
// (vpmuludq reads only the low ones). So a round is, a register, two products, two shifts and two
// three-way xors, with no blends to put the products' halves back into 32-bit lanes: 12
// instructions for 8 counters against 16 with the words in 32-bit lanes. Several registers'
// chains interleave.
template <int R>
inline void philox_counters(uint64_t seed, uint64_t stream, const __m512i (&counters)[R], __m512i (&words)[4][R]) {
  const __m512i m0 = _mm512_set1_epi64(Philox4x32::kMul0), m1 = _mm512_set1_epi64(Philox4x32::kMul1);
  __m512i c0[R], c1[R], c2[R], c3[R];  // the state, 8 counters a register
  for (int r = 0; r < R; ++r) {
    c0[r] = counters[r];                           // the low word in the low half
    c1[r] = _mm512_srli_epi64(counters[r], 32);    // the high word
    c2[r] = _mm512_set1_epi64(static_cast<uint32_t>(stream));
    c3[r] = _mm512_set1_epi64(static_cast<uint32_t>(stream >> 32));
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i vk0 = _mm512_set1_epi32(static_cast<int>(k0)), vk1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int r = 0; r < R; ++r) {
      const __m512i p0 = _mm512_mul_epu32(c0[r], m0), p1 = _mm512_mul_epu32(c2[r], m1);  // 64-bit products
      c0[r] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[r], vk0, 0x96);  // hi1 ^ c1 ^ k0
      c1[r] = p1;                                                                       // lo1 in the low half
      c2[r] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[r], vk1, 0x96);  // hi0 ^ c3 ^ k1
      c3[r] = p0;                                                                       // lo0
    }
    k0 += Philox4x32::kWeyl0;
    k1 += Philox4x32::kWeyl1;
  }
  for (int r = 0; r < R; ++r) {
    words[0][r] = c0[r];
    words[1][r] = c1[r];
    words[2][r] = c2[r];
    words[3][r] = c3[r];
  }
}

// Philox-4x32-10 at the counters counter0 + [0, 16 Blocks) (counter0 % 16 == 0), 8 counters a
// register (philox_counters' layout): counter counter0 + 16 b + 8 h + lane in 64-bit lane `lane`
// of register 2 b + h. With two blocks' chains interleaved, Philox noise (the quantizers' then) was
// made in half the time (0.17 against 0.33 ns an element, Zen 4).
template <int Blocks>
inline void philox_blocks(uint64_t seed, uint64_t stream, uint64_t counter0, __m512i (&words)[4][2 * Blocks]) {
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  __m512i counters[2 * Blocks];
  for (int r = 0; r < 2 * Blocks; ++r)
    counters[r] = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(counter0 + 16u * static_cast<uint64_t>(r / 2) +
                                                                           8u * static_cast<uint64_t>(r % 2))),
                                   lane);
  philox_counters<2 * Blocks>(seed, stream, counters, words);
}

// The low halves of a's 64-bit lanes, then b's: philox_blocks' words of 16 counters in 32-bit lanes.
inline __m512i low_words(__m512i a, __m512i b) {
  return _mm512_permutex2var_epi32(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
}

// 16 Philox-4x32-10 evaluations at once (lanes = counters counter0 + lane, counter0 % 16 == 0),
// bit-identical to Philox4x32::generate: out[k] lane l = word k of counter counter0 + l.
inline void philox16(uint64_t seed, uint64_t stream, uint64_t counter0, __m512i out[4]) {
  __m512i words[4][2];
  philox_blocks<1>(seed, stream, counter0, words);
  for (int k = 0; k < 4; ++k) out[k] = low_words(words[k][0], words[k][1]);
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// Philox-4x32-10 at counters counter0 + [0, 16 Blocks) (counter0 % 16 == 0), bit-identical to
// Philox4x32::generate: out[64 b + 16 w + lane] = word w of counter counter0 + 16 b + lane. 8
// counters a register, the 2 Blocks registers' chains interleaved (philox_rounds). More than two
// blocks at once spill the 16 registers.
template <int Blocks>
inline void philox_lanes(uint64_t seed, uint64_t stream, uint64_t counter0, uint32_t* out) {
  static_assert(Blocks == 1 || Blocks == 2);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  U32x8 c[2 * Blocks][4];  // (registers, state words): register r holds counters counter0 + 8 r + lane
  for (int r = 0; r < 2 * Blocks; ++r) {
    const uint64_t block = counter0 + 16u * static_cast<uint64_t>(r / 2);  // its 16 counters carry into no high word
    c[r][0] = {_mm256_add_epi32(U32x8::set1(static_cast<uint32_t>(block) + 8u * static_cast<uint32_t>(r % 2)).v, lane)};
    c[r][1] = U32x8::set1(static_cast<uint32_t>(block >> 32));
    c[r][2] = U32x8::set1(static_cast<uint32_t>(stream));
    c[r][3] = U32x8::set1(static_cast<uint32_t>(stream >> 32));
  }
  philox_rounds(seed, c);
  for (int r = 0; r < 2 * Blocks; ++r)
    for (int w = 0; w < 4; ++w)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * (r / 2) + 16 * w + 8 * (r % 2)), c[r][w].v);
}
#endif

// Philox-4x32-10 at counters (counter0 + lane) for 16 lanes, bit-identical to
// Philox4x32::generate; out[w * 16 + lane] = word w of lane's output. With AVX2, 8 lanes a
// register (philox_lanes: twice as fast as GCC's vectorisation of the loop below, which holds a
// word in a 64-bit lane); otherwise written lane-wise so the compiler vectorises it.
inline void philox_lanes16(uint64_t seed, uint64_t stream, uint64_t counter0, uint32_t* out) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  philox_lanes<1>(seed, stream, counter0, out);
#else
  // The state words held in 64-bit lanes (values below 2^32), so that each 32x32 -> 64-bit
  // product is one vpmuludq lane.
  alignas(64) uint64_t c0[16], c1[16], c2[16], c3[16];  // (16,) each: the state, lane by lane
  for (int l = 0; l < 16; ++l) {
    c0[l] = static_cast<uint32_t>(static_cast<uint32_t>(counter0) + static_cast<uint32_t>(l));  // counter0 % 16 == 0: no carry
    c1[l] = static_cast<uint32_t>(counter0 >> 32);
    c2[l] = static_cast<uint32_t>(stream);
    c3[l] = static_cast<uint32_t>(stream >> 32);
  }
  uint64_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  constexpr uint64_t m0 = Philox4x32::kMul0, m1 = Philox4x32::kMul1, lo32 = 0xFFFFFFFFull;
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < 16; ++l) {
      const uint64_t p0 = m0 * (c0[l] & lo32);
      const uint64_t p1 = m1 * (c2[l] & lo32);
      c0[l] = (p1 >> 32) ^ c1[l] ^ k0;
      c1[l] = p1 & lo32;
      c2[l] = (p0 >> 32) ^ c3[l] ^ k1;
      c3[l] = p0 & lo32;
    }
    k0 = (k0 + Philox4x32::kWeyl0) & lo32;
    k1 = (k1 + Philox4x32::kWeyl1) & lo32;
  }
  for (int l = 0; l < 16; ++l) {
    out[l] = static_cast<uint32_t>(c0[l]);
    out[16 + l] = static_cast<uint32_t>(c1[l]);
    out[32 + l] = static_cast<uint32_t>(c2[l]);
    out[48 + l] = static_cast<uint32_t>(c3[l]);
  }
#endif
}

}  // namespace packrat::simd

#pragma GCC diagnostic pop
