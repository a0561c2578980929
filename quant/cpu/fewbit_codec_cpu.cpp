// The CPU kernels of the few-bit codec (quant/fewbit/fewbit_codec.h): tiles that stay in L1 (f(x),
// codes, scratch), BMI2 pext to pack, OpenMP over blocks of 8 elements. They write the codes of
// fewbit_index / the step and mask rules element by element and read them back with
// fewbit_apply's rule (tests/quant/codec_bitexact_test.cpp).
#include <algorithm>
#include <cstring>
#include <optional>
#if defined(__BMI2__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "autograd/pointwise.h"
#include "core/cpu/bf16_simd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/cpu/code_bits.h"
#include "quant/bits/bitpack.h"
#include "quant/fewbit/fewbit_codec.h"

namespace packrat {

namespace {

constexpr int64_t kTile = 512;          // elements per tile: f(x), codes and scratch stay in L1
constexpr int64_t kGrainBlocks = kMinParallelWork / 16;  // blocks of 8 elements per thread chunk, at least
static_assert(kTile % 8 == 0, "tiles must start on block boundaries");

template <typename Fn>
void dispatch_bits(int bits, Fn&& fn) {
  if (!with_code_bits<4>(bits, fn)) fail("fewbit codec: bits must be in [1, 4], got {}", bits);
}

// Eight codes (bytes, each < 2^B) as one block word; with BMI2 one pext gathers the low B bits
// of each byte.
template <int B>
inline uint64_t pack8(const uint8_t* c) {
#if defined(__BMI2__)
  uint64_t v;
  std::memcpy(&v, c, 8);
  return _pext_u64(v, 0x0101010101010101ull * ((1u << B) - 1u));
#else
  uint64_t w = 0;
  for (int k = 0; k < 8; ++k) w |= block_put(c[k], k, B);
  return w;
#endif
}

// Packs len codes (len a multiple of 8 except at the very end of the tensor) to dst.
template <int B>
inline void pack_tile(const uint8_t* codes, int64_t len, uint8_t* dst) {
  const int64_t full = len / 8;
  for (int64_t blk = 0; blk < full; ++blk) store_block8(pack8<B>(codes + blk * 8), B, dst + blk * B);
  const int rest = static_cast<int>(len - full * 8);
  if (rest > 0) {
    uint64_t w = 0;
    for (int k = 0; k < rest; ++k) w |= block_put(codes[full * 8 + k], k, B);
    store_block8(w, static_cast<int>(packed_bytes(rest, B)), dst + full * B);
  }
}

// Codes of one tile. `src` is f32 (Table, Step) or u8 (Mask).
template <int B>
inline void make_codes(const FewbitCoder& c, const Pointwise* fn, const void* src, int64_t len, uint8_t* codes,
                       float* scratch) {
  switch (c.kind) {
    case FewbitKind::Table: {
      constexpr int NB = (1 << B) - 1;
      const float* v = static_cast<const float*>(src);
      const FewbitLut lut = c.lut;
      for (int64_t i = 0; i < len; ++i) codes[i] = static_cast<uint8_t>(fewbit_index<NB>(lut, v[i]));
      break;
    }
    case FewbitKind::Step: {
      // The activation's own f' decides, so the mask agrees with the FP32 path bit for bit.
      const float* v = static_cast<const float*>(src);
      (c.from_output ? fn->derivative_from_output : fn->derivative)(v, scratch, len);
      const float hi = c.step_hi;
      for (int64_t i = 0; i < len; ++i) codes[i] = scratch[i] == hi ? 1 : 0;
      break;
    }
    case FewbitKind::Mask: {
      const uint8_t* m = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < len; ++i) codes[i] = m[i] != 0 ? 1 : 0;
      break;
    }
  }
}

#if defined(__AVX2__) && defined(__BMI2__)
// A Table's codes with AVX2, packed as they are made: each value's interval index counted in its
// 32-bit lane (a compare a border: fewbit_index's sum, NaN below every border as there), four
// blocks' lanes narrowed to bytes at once, each block's 8 bytes to 8 B bits by one pext. GCC's
// vectorisation of the scalar loop narrowed every border's comparison to bytes, and 3 bits took
// 0.82 ns a value (one thread, AVX2 Zen 3; BM_FewBitEncode).
template <int B>
struct TableEncoder32 {
  static constexpr int kBorders = (1 << B) - 1;
  __m256 border[kBorders];
  __m256 center;
  bool symmetric;

  explicit TableEncoder32(const FewbitLut& t) : center(_mm256_set1_ps(t.center)), symmetric(t.symmetric != 0) {
    for (int j = 0; j < kBorders; ++j) border[j] = _mm256_set1_ps(t.borders[j]);
  }
  __m256i codes8(const float* v) const {
    __m256 x = _mm256_loadu_ps(v);
    if (symmetric) x = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(x, center));  // |x - center|
    __m256i idx = _mm256_setzero_si256();
    for (int j = 0; j < kBorders; ++j)  // a true comparison is -1
      idx = _mm256_sub_epi32(idx, _mm256_castps_si256(_mm256_cmp_ps(x, border[j], _CMP_GT_OQ)));
    return idx;
  }
  // The packed codes (4 B bytes) of v[0, 32) to dst.
  void pack32(const float* v, uint8_t* dst) const {
    const __m256i w01 = _mm256_packs_epi32(codes8(v), codes8(v + 8));  // per 128-bit lane: 4 + 4 codes
    const __m256i w23 = _mm256_packs_epi32(codes8(v + 16), codes8(v + 24));
    // bytes, 32-bit groups (blocks 0-3 low halves, blocks 0-3 high halves) put in element order
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    alignas(32) uint64_t block[4];  // (4,) each block's 8 codes, one a byte
    _mm256_store_si256(reinterpret_cast<__m256i*>(block), bytes);
    constexpr uint64_t kLowBits = 0x0101010101010101ull * ((1u << B) - 1u);
    unsigned __int128 w = 0;  // the 4 blocks' 32 B bits
    for (int k = 0; k < 4; ++k) w |= static_cast<unsigned __int128>(_pext_u64(block[k], kLowBits)) << (8 * B * k);
    std::memcpy(dst, &w, 4 * B);
  }
};
#endif

// One pass over src: y = f(src) when y is given, and the packed codes of src. src and y: f32
// (elem 4; a Mask's src u8, elem 1), or bf16 (`bf16`: each tile read as its f32 values, f(x) written
// back rounded as Tensor::to rounds).
template <int B>
void encode_impl(const FewbitCoder& c, const Pointwise* fn, const void* src, size_t elem, bool bf16, void* y,
                 int64_t n, uint8_t* packed) {
  const int64_t blocks = (n + 7) / 8;
#if defined(__AVX2__) && defined(__BMI2__)
  std::optional<TableEncoder32<B>> table;  // a Table's borders (a Step's or a Mask's lut has none)
  if (c.kind == FewbitKind::Table) table.emplace(c.lut);
#endif
  parallel_chunks(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    alignas(64) uint8_t codes[kTile];   // (kTile,)
    alignas(64) float scratch[kTile];   // (kTile,) f'(x) of a Step tile
    alignas(64) float x32[kTile];       // (kTile,) a bf16 tile's values
    alignas(64) float y32[kTile];       // (kTile,) their f(x)
    const int64_t end = std::min(n, b1 * 8);
    for (int64_t s = b0 * 8; s < end; s += kTile) {
      const int64_t len = std::min(kTile, end - s);
      const void* v = static_cast<const char*>(src) + s * static_cast<int64_t>(elem);
      if (bf16) {
        simd::bf16_to_f32_run(static_cast<const bf16_t*>(v), len, x32);
        v = x32;
      }
      if (y) {
        fn->forward(static_cast<const float*>(v), bf16 ? y32 : static_cast<float*>(y) + s, len);
        if (bf16) simd::f32_to_bf16_run(y32, len, static_cast<bf16_t*>(y) + s);
      }
      int64_t done = 0;  // values whose codes are written
#if defined(__AVX2__) && defined(__BMI2__)
      if (table)
        for (; done + 32 <= len; done += 32)
          table->pack32(static_cast<const float*>(v) + done, packed + (s + done) / 8 * B);
#endif
      if (done < len) {
        const void* rest = static_cast<const char*>(v) + done * static_cast<int64_t>(bf16 ? sizeof(float) : elem);
        make_codes<B>(c, fn, rest, len - done, codes, scratch);
        pack_tile<B>(codes, len - done, packed + (s + done) / 8 * B);
      }
    }
  });
}

#if defined(__AVX2__)
// A block's 8 codes, lane k = code k, and level[code] lane by lane: one permute for up to 8
// levels, two and a blend on the code's bit 3 for 16. The same products as the scalar loop below.
template <int B>
struct BlockDecoder8 {
  __m256 lo, hi;  // levels 0..7 and 8..15 (B == 4)
  explicit BlockDecoder8(const float* levels) {
    alignas(32) float l[16] = {};  // (16,) the levels, zero past 2^B
    for (int i = 0; i < (1 << B); ++i) l[i] = levels[i];
    lo = _mm256_load_ps(l);
    hi = _mm256_load_ps(l + 8);
  }
  static __m256i codes(uint64_t w) {
    const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts),
                            _mm256_set1_epi32((1 << B) - 1));
  }
  __m256 levels(__m256i code) const {
    const __m256 low = _mm256_permutevar8x32_ps(lo, code);
    if constexpr (B < 4) return low;
    return _mm256_blendv_ps(low, _mm256_permutevar8x32_ps(hi, code), _mm256_castsi256_ps(_mm256_slli_epi32(code, 28)));
  }
  // Full blocks [b0, b1): out = g * level, code ? g : 0 (mask), or level (g null).
  void run(const uint8_t* packed, const float* g, float* out, bool mask, int64_t b0, int64_t b1) const {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const __m256i code = codes(load_block8(packed + blk * B, B));
      float* o = out + blk * 8;
      if (mask) {
        const __m256 zero = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()));
        _mm256_storeu_ps(o, _mm256_andnot_ps(zero, _mm256_loadu_ps(g + blk * 8)));
      } else if (g) {
        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(g + blk * 8), levels(code)));
      } else {
        _mm256_storeu_ps(o, levels(code));
      }
    }
  }
};
#endif

// One pass: out = grad * level[code] (Table, Step), or code ? grad : 0 (Mask), or, with g null,
// out = level[code] (load).
template <int B>
void decode_impl(const FewbitCoder& c, const uint8_t* packed, const float* g, float* out, int64_t n) {
  const int64_t blocks = (n + 7) / 8;
  float levels[1 << B];  // (2^B,)
  for (int i = 0; i < (1 << B); ++i) levels[i] = c.lut.levels[i];
  const bool mask = c.kind == FewbitKind::Mask;
#if defined(__AVX2__)
  const BlockDecoder8<B> simd(levels);
#endif
  parallel_chunks(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    const int64_t full_end = std::min(b1, n / 8);
#if defined(__AVX2__)
    simd.run(packed, g, out, mask, b0, full_end);
    b0 = std::max(b0, full_end);
#endif
    for (int64_t blk = b0; blk < full_end; ++blk) {
      const uint64_t w = load_block8(packed + blk * B, B);
      const int64_t i0 = blk * 8;
      if (mask) {
        for (int k = 0; k < 8; ++k) out[i0 + k] = block_code(w, k, B) ? g[i0 + k] : 0.0f;
      } else if (g) {
        for (int k = 0; k < 8; ++k) out[i0 + k] = g[i0 + k] * levels[block_code(w, k, B)];
      } else {
        for (int k = 0; k < 8; ++k) out[i0 + k] = levels[block_code(w, k, B)];
      }
    }
    if (b1 * 8 > n && full_end < b1) {  // the last, partial block
      const int64_t i0 = full_end * 8;
      const int rest = static_cast<int>(n - i0);
      const uint64_t w = load_block8(packed + full_end * B, B, static_cast<int>(packed_bytes(rest, B)));
      for (int k = 0; k < rest; ++k) {
        const uint32_t code = block_code(w, k, B);
        out[i0 + k] = mask ? (code ? g[i0 + k] : 0.0f) : (g ? g[i0 + k] * levels[code] : levels[code]);
      }
    }
  });
}

}  // namespace

void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const void* src, size_t elem, float* y, int64_t n,
                   uint8_t* packed) {
  dispatch_bits(c.bits, [&](auto B) { encode_impl<B()>(c, fn, src, elem, false, y, n, packed); });
}

void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const bf16_t* src, bf16_t* y, int64_t n,
                   uint8_t* packed) {
  PACKRAT_CHECK(c.kind != FewbitKind::Mask, "fewbit encode: a mask's source is u8, not bf16");
  dispatch_bits(c.bits, [&](auto B) { encode_impl<B()>(c, fn, src, sizeof(bf16_t), true, y, n, packed); });
}

void fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* g, float* out, int64_t n) {
  dispatch_bits(c.bits, [&](auto B) { decode_impl<B()>(c, packed, g, out, n); });
}

}  // namespace packrat
