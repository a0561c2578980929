#pragma once
// Per-plane groups of a nChw16c buffer, 16 groups a register (AVX-512). A tile of the buffer, one
// sample's 16 channels, lies (plane, 16): the 16 channel planes side by side, each cut into the
// same groups (group_geometry's per-plane cut). So the groups at one place of the 16 planes are
// the 16 lanes of the tile's rows, and a row-by-row walk takes them together:
//   - their ranges: lane by lane, the plain scan's order, so group_range's result exactly;
//   - their codes: quantize_value's arithmetic lane by lane, packed into 32-bit words per lane
//     (code i of a group at bits [B i, B i + B) of its stream, bitpack.h's layout);
//   - their values on the way back, written in the tile's own layout.
// The groups' metadata stays one lane at a time (group_params, whose rounding steps are the
// reference's). No transpose into plain order (PlainTile) and no chain of scalar steps a group:
// per-plane groups of 32 spent most of the 2-bit quantize there. The bytes are the plain
// tensor's, as the reference writes them (tests/quant/codec_bitexact_test.cpp).
// Internal: included by group_quant_cpu.cpp only.
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/parallel.h"
#include "quant/cpu/group_quant_simd.h"
#include "quant/group/group_quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define PACKRAT_PLANE_TILES 1
#endif

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers, as in group_quant_simd.h) wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::plane_tiles {

constexpr int64_t kLanes = 16;
constexpr int64_t kMaxGroup = 1024;  // longer groups take the plain walk (a lane's words on the stack)

// Whether g's groups (of a buffer walked as `walk`) are per-plane groups of a nChw16c buffer
// that this CPU can take 16 at a time.
inline bool applies(const GroupGeometry& g, const CodecWalk& walk) {
#if defined(PACKRAT_PLANE_TILES)
  return walk.channels > 0 && !walk.nhwc && walk.block == kLanes && walk.channels % kLanes == 0 &&
         g.span_len == walk.plane && g.spans * g.span_len == g.numel && g.group_size <= kMaxGroup;
#else
  (void)g, (void)walk;
  return false;
#endif
}

#if defined(PACKRAT_PLANE_TILES)

// Calls fn(t0, t1) over ranges of a buffer's tiles, in parallel where the work is large enough
// (dynamic: a descheduled thread does not hold the others at the barrier with a static share).
template <typename Fn>
void for_tile_ranges(int64_t tiles, int64_t tile_elements, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinParallelWork / tile_elements);
  const int64_t ranges = (tiles + grain - 1) / grain;
  if (ranges <= 1 || omp_get_max_threads() == 1) {
    fn(int64_t{0}, tiles);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < ranges; ++r) fn(r * grain, std::min(tiles, (r + 1) * grain));
}

// The words of one row of groups: word w of lane c's code stream at words[w * 16 + c].
struct LaneWords {
  alignas(64) uint32_t words[kLanes * (kMaxGroup * 8 / 32)];  // (words of the longest group at 8 bits, 16)
  // Lane c's first `bytes` bytes, in stream order, to dst.
  void copy_out(int64_t c, int64_t bytes, uint8_t* dst) const {
    int64_t w = 0;
    for (; 4 * w + 4 <= bytes; ++w) std::memcpy(dst + 4 * w, &words[w * kLanes + c], 4);
    if (4 * w < bytes) std::memcpy(dst + 4 * w, &words[w * kLanes + c], static_cast<size_t>(bytes - 4 * w));
  }
  // dst's `bytes` bytes as lane c's stream (the last word's missing bytes zero).
  void copy_in(int64_t c, int64_t bytes, const uint8_t* src) {
    int64_t w = 0;
    for (; 4 * w + 4 <= bytes; ++w) std::memcpy(&words[w * kLanes + c], src + 4 * w, 4);
    if (4 * w < bytes) {
      uint32_t last = 0;
      std::memcpy(&last, src + 4 * w, static_cast<size_t>(bytes - 4 * w));
      words[w * kLanes + c] = last;
    }
  }
};

// One thread's rounding noise of a tile: the tile's plain elements [e0, e0 + 16 plane) (its 16
// planes one after the other, the plain order) from the Philox blocks that cover them.
class TileNoise {
 public:
  TileNoise(const QuantNoise& noise, int64_t tile_elements)
      : noise_(noise), buf_(new uint16_t[static_cast<size_t>(tile_elements + 3 * 128)]) {}
  // Fills the noise of [e0, e0 + n); returns where element e0's lies.
  const uint16_t* fill(int64_t e0, int64_t n) {
    const int64_t b0 = e0 >> 7, b1 = (e0 + n - 1) >> 7;
    group_simd::fill_noise_blocks(noise_, b0, b1, buf_.get());
    buf_[(b1 - b0 + 1) * 128] = 0;  // read as the upper half of the last element's 32-bit gather
    return buf_.get() + (e0 - 128 * b0);
  }

 private:
  QuantNoise noise_;
  std::unique_ptr<uint16_t[]> buf_;  // (blocks covering a tile + 1 spare element,)
};

// Quantizes the per-plane groups of a nChw16c buffer x (applies(g, walk)): the codes, metadata
// and group_range_sq of quantize_groups.
template <int B>
void quantize(const float* x, const GroupGeometry& g, const CodecWalk& walk, Rounding rounding, const QuantNoise& noise,
              uint8_t* codes, uint8_t* meta, double* range_sq) {
  constexpr uint32_t levels = (1u << B) - 1u;
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, gps = g.groups_per_span;
  const int meta_size = meta_bytes_per_group(g.meta);
  const bool stochastic = rounding == Rounding::Stochastic;
  for_tile_ranges(g.spans / kLanes, tile_elements, [&](int64_t t0, int64_t t1) {
    TileNoise tile_noise(noise, tile_elements);
    auto words = std::make_unique<LaneWords>();
    const __m512i lane_plane = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                  _mm512_set1_epi32(static_cast<int>(plane)));
    const __m512 zero = _mm512_setzero_ps(), half = _mm512_set1_ps(0.5f), scale = _mm512_set1_ps(1.0f / 65536.0f);
    const __m512i one = _mm512_set1_epi32(1), vlev = _mm512_set1_epi32(static_cast<int>(levels));
    for (int64_t t = t0; t < t1; ++t) {
      const float* tile = x + t * tile_elements;  // (plane, 16)
      const uint16_t* rnd = stochastic ? tile_noise.fill(t * tile_elements, tile_elements) : nullptr;  // (16, plane)
      for (int64_t j = 0; j < gps; ++j) {
        const GroupGeometry::Place at = g.place_in(t * kLanes, j);  // lane 0's group; lane c's is span 16 t + c
        const int64_t s0 = at.start - t * kLanes * plane, len = at.len;
        const float* rows = tile + s0 * kLanes;  // (len, 16)
        __m512 vmn = _mm512_loadu_ps(rows), vmx = vmn;
        for (int64_t i = 1; i < len; ++i) {
          const __m512 v = _mm512_loadu_ps(rows + i * kLanes);
          vmn = _mm512_min_ps(v, vmn);  // the second operand where either is NaN: the scan's rule
          vmx = _mm512_max_ps(v, vmx);
        }
        alignas(64) float mn[kLanes], mx[kLanes], pmin[kLanes], pinv[kLanes];
        _mm512_store_ps(mn, vmn);
        _mm512_store_ps(mx, vmx);
        for (int64_t c = 0; c < kLanes; ++c) {
          const GroupParams p = group_params(mn[c], mx[c], B, g.meta);
          const int64_t gi = (t * kLanes + c) * gps + j;
          store_group_meta(p, g.meta, meta + gi * meta_size);
          if (range_sq) range_sq[gi] = group_range_sq(p, len, B);
          pmin[c] = p.min;
          pinv[c] = p.inv_step;
        }
        const __m512 vmin = _mm512_load_ps(pmin), vinv = _mm512_load_ps(pinv);
        // Row i's codes into the lanes' current 32-bit words; a word full goes to `words`.
        __m512i word = _mm512_setzero_si512();
        for (int64_t i = 0; i < len; ++i) {
          const __m512 u = _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(rows + i * kLanes), vmin), vinv), zero);
          const __m512 fl = _mm512_roundscale_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
          const __m512 frac = _mm512_sub_ps(u, fl);
          __m512 r = half;
          if (rnd) {  // lane c's noise: element s0 + i of its plane
            const __m512i at_i = _mm512_add_epi32(lane_plane, _mm512_set1_epi32(static_cast<int>(s0 + i)));
            const __m512i h = _mm512_and_si512(_mm512_i32gather_epi32(at_i, rnd, 2), _mm512_set1_epi32(0xFFFF));
            r = _mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(h), half), scale);
          }
          __m512i code = _mm512_cvttps_epi32(fl);
          code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), code, one);
          code = _mm512_min_epi32(code, vlev);
          const int64_t bit = B * i, off = bit & 31;
          word = _mm512_or_si512(word, _mm512_sll_epi32(code, _mm_cvtsi64_si128(off)));
          if (off + B >= 32) {  // the word is full: the code's bits past it start the next
            _mm512_store_si512(words->words + (bit >> 5) * kLanes, word);
            word = off + B > 32 ? _mm512_srl_epi32(code, _mm_cvtsi64_si128(32 - off)) : _mm512_setzero_si512();
          }
        }
        if ((B * len) & 31) _mm512_store_si512(words->words + ((B * len) >> 5) * kLanes, word);
        const int64_t bytes = packed_bytes(len, B);
        for (int64_t c = 0; c < kLanes; ++c)
          words->copy_out(c, bytes, codes + g.place_in(t * kLanes + c, j).code_offset);
      }
    }
  });
}

// Dequantizes them back into a nChw16c buffer out: dequantize_groups' values.
template <int B>
void dequantize(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, const CodecWalk& walk, float* out) {
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, gps = g.groups_per_span;
  const int meta_size = meta_bytes_per_group(g.meta);
  for_tile_ranges(g.spans / kLanes, tile_elements, [&](int64_t t0, int64_t t1) {
    auto words = std::make_unique<LaneWords>();
    const __m512i mask = _mm512_set1_epi32((1 << B) - 1);
    for (int64_t t = t0; t < t1; ++t) {
      float* tile = out + t * tile_elements;  // (plane, 16)
      for (int64_t j = 0; j < gps; ++j) {
        const GroupGeometry::Place at = g.place_in(t * kLanes, j);
        const int64_t s0 = at.start - t * kLanes * plane, len = at.len, bytes = packed_bytes(len, B);
        alignas(64) float pmin[kLanes], pstep[kLanes];
        for (int64_t c = 0; c < kLanes; ++c) {
          const GroupParams p = load_group_range(meta + ((t * kLanes + c) * gps + j) * meta_size, g.meta);
          pmin[c] = p.min;
          pstep[c] = p.step;
          words->copy_in(c, bytes, codes + g.place_in(t * kLanes + c, j).code_offset);
        }
        const __m512 vmin = _mm512_load_ps(pmin), vstep = _mm512_load_ps(pstep);
        float* rows = tile + s0 * kLanes;  // (len, 16)
        for (int64_t i = 0; i < len; ++i) {
          const int64_t bit = B * i, off = bit & 31;
          const uint32_t* w = words->words + (bit >> 5) * kLanes;
          __m512i code = _mm512_srl_epi32(_mm512_load_si512(w), _mm_cvtsi64_si128(off));
          if (off + B > 32)  // the code's high bits start the next word
            code = _mm512_or_si512(code, _mm512_sll_epi32(_mm512_load_si512(w + kLanes), _mm_cvtsi64_si128(32 - off)));
          code = _mm512_and_si512(code, mask);
          _mm512_storeu_ps(rows + i * kLanes, _mm512_fmadd_ps(_mm512_cvtepi32_ps(code), vstep, vmin));  // as dequantize_value
        }
      }
    }
  });
}

#endif  // PACKRAT_PLANE_TILES

}  // namespace packrat::plane_tiles

#pragma GCC diagnostic pop
