#pragma once
// Per-plane groups of a channel-blocked buffer, a group a lane: nChw16c with AVX-512 (16 lanes),
// nChw8c with AVX2 (8). A tile of the buffer, one sample's B channels, lies (plane, B): the B
// channel planes side by side, each cut into the same groups (group_geometry's per-plane cut). So
// the groups at one place of the B planes are the B lanes of the tile's rows, and a row-by-row
// walk takes them together:
//   - their ranges: lane by lane, the plain scan's order, so group_range's result exactly;
//   - their codes: quantize_value's arithmetic lane by lane, packed into 32-bit words per lane
//     (code i of a group at bits [B i, B i + B) of its stream, bitpack.h's layout);
//   - their values on the way back, written in the tile's own layout.
// The groups' metadata stays one lane at a time (group_params, whose rounding steps are the
// reference's). No transpose into plain order (PlainTile) and no chain of scalar steps a group:
// per-plane groups of 32 spent most of the 2-bit quantize there. The bytes are the plain
// tensor's, as the reference writes them (tests/quant/codec_bitexact_test.cpp).
// Internal: included by group_quant_cpu.cpp and its bit-exact test (it includes immintrin.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <utility>

#include "core/cpu/bf16_simd.h"
#include "core/parallel.h"
#include "quant/cpu/group_quant_simd.h"
#include "quant/group/group_quant.h"

#if (defined(__AVX512F__) && defined(__AVX512BW__)) || defined(__AVX2__)
#include <immintrin.h>
#define PACKRAT_PLANE_TILES 1
#endif

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers, as in group_quant_simd.h) wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::plane_tiles {

#if defined(__AVX512F__) && defined(__AVX512BW__)
// A tile row of a nChw16c buffer: 16 floats, or 16 32-bit integers, a register.
struct Lanes {
  static constexpr int64_t kCount = 16;
  using F = __m512;
  using I = __m512i;
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F load(const bf16_t* p) { return simd::load_bf16x16(p); }
  static void store(bf16_t* p, F v) { simd::store_bf16x16(p, v); }
  static I load(const uint32_t* p) { return _mm512_load_si512(p); }
  static void store(uint32_t* p, I v) { _mm512_store_si512(p, v); }
  static F set(float x) { return _mm512_set1_ps(x); }
  static I set(int x) { return _mm512_set1_epi32(x); }
  // min / max: the second operand where either is NaN (MINPS's rule, the plain scan's).
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F trunc(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  static I to_int(F a) { return _mm512_cvttps_epi32(a); }
  // code + 1 where r < frac
  static I round_up(I code, F r, F frac) {
    return _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), code, _mm512_set1_epi32(1));
  }
  static I one_where_less(F a, F b) { return _mm512_maskz_set1_epi32(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), 1); }  // 1 where a < b, else 0
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I min(I a, I b) { return _mm512_min_epi32(a, b); }
  static I bit_and(I a, I b) { return _mm512_and_si512(a, b); }
  static I bit_or(I a, I b) { return _mm512_or_si512(a, b); }
  static I zero() { return _mm512_setzero_si512(); }
  static I shl(I a, int64_t n) { return _mm512_sll_epi32(a, _mm_cvtsi64_si128(n)); }
  static I shr(I a, int64_t n) { return _mm512_srl_epi32(a, _mm_cvtsi64_si128(n)); }
  template <int N>
  static I shl(I a) { return _mm512_slli_epi32(a, N); }
  template <int N>
  static I shr(I a) { return _mm512_srli_epi32(a, N); }
  // Lane c: (c >> shift) * stride (bytes: a gather's offsets).
  static I lane_offsets(int64_t stride, int shift = 0) {
    const I lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mullo_epi32(shr(lane, shift), set(static_cast<int>(stride)));
  }
  // Lane c: the 32-bit word at base + offsets[c] bytes.
  static I gather(const uint8_t* base, I offsets) { return _mm512_i32gather_epi32(offsets, base, 1); }
  // 16 16-bit values at p, each widened to its 32-bit lane.
  static I widen16(const uint16_t* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // rows[c] lane i -> rows[i] lane c: a 16 x 16 transpose of 32-bit lanes.
  static void transpose(I (&rows)[16]) {
    I t[16];
    for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: (row i, row i+1) interleaved by pairs
      t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // rows[i + j], lane L: column 4L + j of rows i..i+3
      rows[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      rows[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      rows[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      rows[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; ++j) {  // column 4L + j: lane L of rows j, 4 + j, 8 + j, 12 + j
      const I u0 = _mm512_shuffle_i32x4(rows[j], rows[4 + j], 0x44), u1 = _mm512_shuffle_i32x4(rows[j], rows[4 + j], 0xEE);
      const I v0 = _mm512_shuffle_i32x4(rows[8 + j], rows[12 + j], 0x44), v1 = _mm512_shuffle_i32x4(rows[8 + j], rows[12 + j], 0xEE);
      t[j] = _mm512_shuffle_i32x4(u0, v0, 0x88);
      t[4 + j] = _mm512_shuffle_i32x4(u0, v0, 0xDD);
      t[8 + j] = _mm512_shuffle_i32x4(u1, v1, 0x88);
      t[12 + j] = _mm512_shuffle_i32x4(u1, v1, 0xDD);
    }
    for (int i = 0; i < 16; ++i) rows[i] = t[i];
  }
  // Lane masks, for group_params' branches.
  using M = __mmask16;
  static I bits(F a) { return _mm512_castps_si512(a); }
  static F from_bits(I a) { return _mm512_castsi512_ps(a); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static M is_nan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M less(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M less_equal(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static M nonzero(I a) { return _mm512_test_epi32_mask(a, a); }
  static M negative(I a) { return _mm512_cmplt_epi32_mask(a, zero()); }
  static M both(M a, M b) { return static_cast<M>(a & b); }
  static M but_not(M a, M b) { return static_cast<M>(a & ~b); }  // a and not b
  static F select(M m, F yes, F no) { return _mm512_mask_blend_ps(m, no, yes); }
  static I select(M m, I yes, I no) { return _mm512_mask_blend_epi32(m, no, yes); }
  static F permute(F a, I lane_of) { return _mm512_permutexvar_ps(lane_of, a); }  // lane c: a's lane lane_of[c]
};
#elif defined(__AVX2__)
// A tile row of a nChw8c buffer: 8 floats, or 8 32-bit integers, a register.
struct Lanes {
  static constexpr int64_t kCount = 8;
  using F = __m256;
  using I = __m256i;
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F load(const bf16_t* p) { return simd::load_bf16x8(p); }
  static void store(bf16_t* p, F v) { simd::store_bf16x8(p, v); }
  static I load(const uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(uint32_t* p, I v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
  static F set(float x) { return _mm256_set1_ps(x); }
  static I set(int x) { return _mm256_set1_epi32(x); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F abs(F a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F trunc(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  static I to_int(F a) { return _mm256_cvttps_epi32(a); }
  static I round_up(I code, F r, F frac) {  // the compare's all-ones lanes are -1
    return _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(r, frac, _CMP_LT_OQ)));
  }
  static I one_where_less(F a, F b) {  // 1 where a < b (ordered), else 0
    return _mm256_srli_epi32(_mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)), 31);
  }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I min(I a, I b) { return _mm256_min_epi32(a, b); }
  static I bit_and(I a, I b) { return _mm256_and_si256(a, b); }
  static I bit_or(I a, I b) { return _mm256_or_si256(a, b); }
  static I zero() { return _mm256_setzero_si256(); }
  static I shl(I a, int64_t n) { return _mm256_sll_epi32(a, _mm_cvtsi64_si128(n)); }
  static I shr(I a, int64_t n) { return _mm256_srl_epi32(a, _mm_cvtsi64_si128(n)); }
  template <int N>
  static I shl(I a) { return _mm256_slli_epi32(a, N); }
  template <int N>
  static I shr(I a) { return _mm256_srli_epi32(a, N); }
  static I lane_offsets(int64_t stride, int shift = 0) {  // lane c: (c >> shift) * stride
    return _mm256_mullo_epi32(shr(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), shift), set(static_cast<int>(stride)));
  }
  static I gather(const uint8_t* base, I offsets) {  // lane c: the 32-bit word at base + offsets[c] bytes
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), offsets, 1);
  }
  // 8 16-bit values at p, each widened to its 32-bit lane.
  static I widen16(const uint16_t* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // rows[c] lane i -> rows[i] lane c: an 8 x 8 transpose of 32-bit lanes.
  static void transpose(I (&rows)[8]) {
    I t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(rows[i], rows[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(rows[i], rows[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; ++j) {  // 128-bit halves: rows j (low) and 4 + j (high)
      rows[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
      rows[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
  }
  // Lane masks (all-ones lanes), for group_params' branches.
  using M = __m256;
  static I bits(F a) { return _mm256_castps_si256(a); }
  static F from_bits(I a) { return _mm256_castsi256_ps(a); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static M is_nan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M less(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M less_equal(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static M nonzero(I a) { return _mm256_xor_ps(from_bits(_mm256_cmpeq_epi32(a, zero())), from_bits(set(-1))); }
  static M negative(I a) { return from_bits(_mm256_cmpgt_epi32(zero(), a)); }
  static M both(M a, M b) { return _mm256_and_ps(a, b); }
  static M but_not(M a, M b) { return _mm256_andnot_ps(b, a); }  // a and not b
  static F select(M m, F yes, F no) { return _mm256_blendv_ps(no, yes, m); }
  static I select(M m, I yes, I no) { return bits(_mm256_blendv_ps(from_bits(no), from_bits(yes), m)); }
  static F permute(F a, I lane_of) { return _mm256_permutevar8x32_ps(a, lane_of); }  // lane c: a's lane lane_of[c]
};
#endif

#if defined(PACKRAT_PLANE_TILES)
constexpr int64_t kLanes = Lanes::kCount;
#else
constexpr int64_t kLanes = 16;
#endif
constexpr int64_t kMaxGroup = 1024;  // longer groups take the plain walk (LaneWords holds a row's words)

// Whether `walk` is of a channel-blocked buffer whose tiles are this CPU's rows (nChw16c with
// AVX-512, nChw8c with AVX2; or NHWC walked as one block of all C channels, C a multiple of the
// lanes: a position's row of C values holds C / lanes tiles' rows), every tile full.
inline bool walks_tiles(const CodecWalk& walk) {
  return walk.channels > 0 && !walk.nhwc && walk.block % kLanes == 0 && walk.channels % walk.block == 0 &&
         walk.plane > 0;
}

// Where tile t (lanes channels of one sample: the plain elements [t lanes plane, (t + 1) lanes
// plane)) starts in a buffer walked as `walk`, and the stride between its rows (positions).
struct TilePlace {
  int64_t tiles_a_row, plane;
  int64_t row_stride() const { return tiles_a_row * kLanes; }
  int64_t start(int64_t t) const {
    return (t / tiles_a_row) * tiles_a_row * kLanes * plane + (t % tiles_a_row) * kLanes;
  }
};
inline TilePlace tile_place(const CodecWalk& walk) { return TilePlace{walk.block / kLanes, walk.plane}; }

// The per-plane geometry of g's groups (of a buffer walked as `walk`) where they are groups within
// the channel planes of a blocked buffer whose tiles are this CPU's rows; spans 0 where not. g
// itself for per-plane groups; for per-sample groups that cut every plane into whole groups (groups
// of 256 on 32x32 and 16x16 planes), the per-plane geometry of the same groups: the same places,
// codes, metadata and noise, group for group, since all are full and follow one another.
inline GroupGeometry tile_geometry(const GroupGeometry& g, const CodecWalk& walk) {
  GroupGeometry t;
#if defined(PACKRAT_PLANE_TILES)
  if (!walks_tiles(walk) || g.spans * g.span_len != g.numel || g.group_size > kMaxGroup) return t;
  if (g.span_len == walk.plane) {
    t = g;
  } else if (g.tail_len == g.group_size && walk.plane % g.group_size == 0 && g.span_len % walk.plane == 0) {
    t = g;
    t.spans = g.numel / walk.plane;
    t.span_len = walk.plane;
    t.groups_per_span = walk.plane / g.group_size;
  }
#else
  (void)g, (void)walk;
#endif
  return t;
}

#if defined(PACKRAT_PLANE_TILES)

// Calls fn(t0, t1) over ranges of a buffer's tiles, in parallel where the work is large enough,
// each thread first on its own block of them (parallel_ranges_local_first).
template <typename Fn>
void for_tile_ranges(int64_t tiles, int64_t tile_elements, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinParallelWork / tile_elements);
  const int64_t ranges = (tiles + grain - 1) / grain;
  if (ranges <= 1 || omp_get_max_threads() == 1) {
    fn(int64_t{0}, tiles);
    return;
  }
  parallel_ranges_local_first(ranges, [&](int64_t r) { fn(r * grain, std::min(tiles, (r + 1) * grain)); });
}

// group_params of kLanes groups at once from their ranges mn, mx (kLanes each): their min, step
// and inv_step (kLanes each), lane by lane group_params' steps, roundings and NaN, bit for bit.
// Sixteen scalar calls, two divisions and a few branches each, were a sixth of the 1-bit
// per-plane quantize (perf, the 2-bit EfficientNet step).
template <int B>
inline void lane_group_params(const float* mn, const float* mx, MetaType meta, float* min, float* step, float* inv_step) {
  using F = Lanes::F;
  using I = Lanes::I;
  using M = Lanes::M;
  const F levels = Lanes::set(static_cast<float>((1 << B) - 1)), zero = Lanes::set(0.0f);
  const I high = Lanes::set(static_cast<int>(0xFFFF0000u)), low = Lanes::set(0xFFFF), ulp = Lanes::set(0x10000);
  const I nan = Lanes::set(0x7FC00000);  // the one NaN: group_params' step, kBf16QuietNan widened
  // x rounded to bf16 down (negative = false: toward -inf for a negative inexact x) or up, as
  // f32_to_bf16_down / up: truncation, one bf16 ulp further where that is the other way.
  auto to_bf16 = [&](F x, bool up) {
    const I u = Lanes::bits(x), t = Lanes::bit_and(u, high);
    const M inexact = Lanes::nonzero(Lanes::bit_and(u, low));
    const M away = up ? Lanes::but_not(inexact, Lanes::negative(u)) : Lanes::both(inexact, Lanes::negative(u));
    return Lanes::from_bits(Lanes::select(Lanes::is_nan(x), nan, Lanes::select(away, Lanes::add(t, ulp), t)));
  };
  const F vmn = Lanes::load(mn), vmx = Lanes::load(mx);
  const F vmin = meta == MetaType::BF16 ? to_bf16(vmn, false) : vmn;
  F vstep = Lanes::div(Lanes::sub(vmx, vmin), levels);
  vstep = Lanes::select(Lanes::is_nan(vstep), Lanes::from_bits(nan), vstep);
  if (meta == MetaType::BF16) {
    vstep = to_bf16(vstep, true);
  } else {  // one ulp up where the grid falls short of mx
    const M short_of = Lanes::both(Lanes::less(zero, vstep), Lanes::less(Lanes::fmadd(levels, vstep, vmin), vmx));
    vstep = Lanes::select(short_of, Lanes::from_bits(Lanes::add(Lanes::bits(vstep), Lanes::set(1))), vstep);
  }
  const F inv = Lanes::div(Lanes::set(1.0f), vstep);  // safe_inverse
  const M finite = Lanes::both(Lanes::less(zero, vstep), Lanes::less_equal(inv, Lanes::set(3.0e38f)));
  Lanes::store(min, vmin);
  Lanes::store(step, vstep);
  Lanes::store(inv_step, Lanes::select(finite, inv, zero));
}

// The metadata records (store_group_meta's) of kLanes groups from their params (lane_group_params'),
// lane c's at dst + c * lane_stride. A bf16 record is the two values' high halves in one 32-bit
// word, made for the lanes at once: lane_group_params' values are bf16 already (NaN the one quiet
// NaN), so f32_to_bf16_down / up would return those halves; sixteen scalar calls, each with its
// NaN and rounding tests, were a sixth of the 2-bit per-plane quantize in perf.
inline void store_lane_meta(const float* min, const float* step, MetaType meta, uint8_t* dst, int64_t lane_stride) {
  if (meta == MetaType::BF16) {
    alignas(64) uint32_t records[kLanes];
    Lanes::store(records, Lanes::bit_or(Lanes::shr(Lanes::bits(Lanes::load(min)), 16),
                                        Lanes::bit_and(Lanes::bits(Lanes::load(step)), Lanes::set(static_cast<int>(0xFFFF0000u)))));
    for (int64_t c = 0; c < kLanes; ++c) std::memcpy(dst + c * lane_stride, &records[c], 4);
    return;
  }
  for (int64_t c = 0; c < kLanes; ++c) store_group_meta(GroupParams{min[c], step[c], 0.0f}, meta, dst + c * lane_stride);
}

// Whether lanes `stride` bytes apart can be gathered: a gather's offsets are 32-bit (lanes 2 GiB or
// more apart, planes of 2^28 values, are loaded one by one).
inline bool gathers_fit(int64_t stride) { return kLanes * stride < (int64_t{1} << 31); }

// Asks for the cache line at src + c * lane_stride of every lane c: the dequantize's gathers of
// codes and metadata written a whole forward ago wait for memory, which AMD's prefetchers do not
// fetch ahead of gathers (a quarter of the 2-bit per-plane dequantize waited on the codes' gather in
// the EfficientNet step, perf, AVX2 EPYC; a tenth after). Past the buffer's end it asks for nothing.
inline void prefetch_lanes(const uint8_t* src, int64_t lane_stride) {
  for (int64_t c = 0; c < kLanes; ++c) _mm_prefetch(reinterpret_cast<const char*>(src + c * lane_stride), _MM_HINT_T0);
}

// The params (load_group_range's min and step) of the lanes' groups from their metadata records,
// lane c's at src + (c >> shift) * lane_stride (shift: 2^shift lanes a group, whole_plane_tiles.h).
// bf16 records in one gather: sixteen scalar loads stored to an array and read back as one register
// waited on the stores (the 1-bit per-plane dequantize, perf).
inline void load_lane_meta(const uint8_t* src, int64_t lane_stride, MetaType meta, Lanes::F& min, Lanes::F& step,
                           int shift = 0) {
  if (meta == MetaType::BF16 && gathers_fit(lane_stride)) {  // a record: min's bf16 bits, then step's
    const Lanes::I records = Lanes::gather(src, Lanes::lane_offsets(lane_stride, shift));
    min = Lanes::from_bits(Lanes::shl<16>(records));
    step = Lanes::from_bits(Lanes::bit_and(records, Lanes::set(static_cast<int>(0xFFFF0000u))));
    return;
  }
  alignas(64) float pmin[kLanes], pstep[kLanes];
  for (int64_t c = 0; c < kLanes; ++c) {
    const GroupParams p = load_group_range(src + (c >> shift) * lane_stride, meta);
    pmin[c] = p.min;
    pstep[c] = p.step;
  }
  min = Lanes::load(pmin);
  step = Lanes::load(pstep);
}

// The words of one row of groups: word w of lane c's code stream at words[w * lanes + c]. Made
// for overwrite (16 KiB a range of tiles: zeroing them was a seventh of the 2-bit dequantize of
// whole 4 x 4 planes at 2 threads); only words the codes fill are read.
// A last partial word moves byte by byte: a memcpy of 1 to 3 bytes was a call to libc's, and its
// wait a quarter of the per-plane dequantize of groups of 25 and 28 values (7 bytes at 2 bits).
struct LaneWords {
  alignas(64) uint32_t words[kLanes * (kMaxGroup * 8 / 32)];  // (words of the longest group at 8 bits, lanes)
  // The calling thread's, kept from one range of tiles to the next (as TileNoise::of_thread); its
  // words are whatever the last walk left.
  static LaneWords& of_thread() {
    thread_local LaneWords kept;
    return kept;
  }
  // Lane c's first `bytes` bytes, in stream order, to dst. `may_spill`: the up to 3 bytes after
  // them are written later (the next group's), so a last partial word goes out whole.
  void copy_out(int64_t c, int64_t bytes, uint8_t* dst, bool may_spill = false) const {
    int64_t w = 0;
    for (; 4 * w + 4 <= bytes; ++w) std::memcpy(dst + 4 * w, &words[w * kLanes + c], 4);
    if (4 * w < bytes) {
      const uint32_t last = words[w * kLanes + c];
      if (may_spill) {
        std::memcpy(dst + 4 * w, &last, 4);
        return;
      }
      for (int64_t b = 4 * w; b < bytes; ++b) dst[b] = static_cast<uint8_t>(last >> (8 * (b - 4 * w)));
    }
  }
  // The lanes' streams of `bytes` bytes, lane c's at src + c * lane_stride, a word of every lane a
  // gather. `may_overread`: the up to 3 bytes after the last lane's stream are in the buffer, so a
  // last partial word is read whole (its bytes past the stream are never decoded).
  void gather_in(int64_t bytes, const uint8_t* src, int64_t lane_stride, bool may_overread) {
    if (!gathers_fit(lane_stride)) {
      for (int64_t c = 0; c < kLanes; ++c) copy_in(c, bytes, src + c * lane_stride);
      return;
    }
    const Lanes::I offsets = Lanes::lane_offsets(lane_stride);
    const int64_t whole = may_overread ? (bytes + 3) / 4 : bytes / 4;
    for (int64_t w = 0; w < whole; ++w) Lanes::store(&words[w * kLanes], Lanes::gather(src + 4 * w, offsets));
    if (4 * whole < bytes)
      for (int64_t c = 0; c < kLanes; ++c) copy_in_tail(c, bytes, src + c * lane_stride, whole);
  }
  // dst's `bytes` bytes as lane c's stream (the last word's missing bytes zero).
  void copy_in(int64_t c, int64_t bytes, const uint8_t* src) {
    int64_t w = 0;
    for (; 4 * w + 4 <= bytes; ++w) std::memcpy(&words[w * kLanes + c], src + 4 * w, 4);
    copy_in_tail(c, bytes, src, w);
  }

 private:
  // Lane c's partial word w (the last, where 4 w < bytes), byte by byte.
  void copy_in_tail(int64_t c, int64_t bytes, const uint8_t* src, int64_t w) {
    if (4 * w >= bytes) return;
    uint32_t last = 0;
    for (int64_t b = 4 * w; b < bytes; ++b) last |= static_cast<uint32_t>(src[b]) << (8 * (b - 4 * w));
    words[w * kLanes + c] = last;
  }
};

// One thread's rounding noise of a tile: the tile's plain elements [e0, e0 + lanes plane) (its
// planes one after the other, the plain order), laid out as the tile's rows are: element i of
// lane c's plane at rows[i * lanes + c], widened to 32 bits, so that a row's noise is one load.
// One stream: made lane by lane (fill_by_lanes). Bucketed tensors (the mixed codec's,
// bucket_blocks > 0 blocks a bucket), whose element e draws its noise from block e / 128 of its
// bucket's own stream, stream_of(noise.stream, bucket): made in plain order from the noise blocks
// that cover the tile, then transposed into rows. (A gather of the lanes' 16-bit values from the
// plain order, one a row, was a fifth of the 1-bit quantize in perf: its latency, on the AMD EPYC
// Zen 4.)
class TileNoise {
 public:
  using StreamOf = uint64_t (*)(uint64_t stream, uint64_t bucket);
  // The calling thread's TileNoise, set to draw `noise` for tiles of `plane`-value planes. Its
  // buffers stay with the thread from one range of tiles and one call to the next: made anew for
  // every range of 32K values of a parallel walk, they and LaneWords kept libc's malloc and free at
  // 1.6% of the 2-thread per-plane quantize and dequantize (perf, AVX2 EPYC; 0.4% kept).
  static TileNoise& of_thread(const QuantNoise& noise, int64_t plane, int64_t bucket_blocks = 0,
                              StreamOf stream_of = nullptr) {
    thread_local TileNoise kept;
    kept.reset(noise, plane, bucket_blocks, stream_of);
    return kept;
  }
  // Fills the noise of the tile whose plain elements start at e0; returns its rows.
  const uint32_t* fill(int64_t e0) {
    if (bucket_blocks_ == 0) return fill_by_lanes(e0);
    const int64_t n = kLanes * plane_, b0 = e0 >> 7, b1 = (e0 + n - 1) >> 7;
    if (b0 != held_first_ || b1 > held_last_) hold(b0, b1);
    const uint16_t* src = plain_.get() + (e0 - 128 * b0);  // (lanes, plane)
    uint32_t* rows = rows_.get();
#if defined(__AVX512BW__)
    if (plane_ == 2 || plane_ == 4) {  // the tile's 32 or 64 values, two rows a permute of 16-bit values
      const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 32);  // within plain_'s blocks
      for (int64_t r = 0; 2 * r < plane_; ++r) {
        const __m512i two = _mm512_permutex2var_epi16(a, _mm512_load_si512(small_rows_[r]), b);
        Lanes::store(rows + 2 * r * kLanes, _mm512_cvtepu16_epi32(_mm512_castsi512_si256(two)));
        Lanes::store(rows + (2 * r + 1) * kLanes, _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(two, 1)));
      }
      return rows;
    }
#elif defined(__AVX2__)
    if (plane_ <= 4 && kLanes % plane_ == 0) return fill_small(src, rows);
#endif
    int64_t i = 0;
    for (; i + kLanes <= plane_; i += kLanes) {  // a kLanes x kLanes block a step
      Lanes::I block[kLanes];
      for (int64_t c = 0; c < kLanes; ++c) block[c] = Lanes::widen16(src + c * plane_ + i);
      Lanes::transpose(block);
      for (int64_t k = 0; k < kLanes; ++k) Lanes::store(rows + (i + k) * kLanes, block[k]);
    }
    for (; i < plane_; ++i)
      for (int64_t c = 0; c < kLanes; ++c) rows[i * kLanes + c] = src[c * plane_ + i];
    return rows;
  }

 private:
  TileNoise() : rows_(nullptr, std::free) {}
  void reset(const QuantNoise& noise, int64_t plane, int64_t bucket_blocks, StreamOf stream_of) {
    noise_ = noise;
    key_ = noise_key(noise.seed, noise.stream);
    bucket_blocks_ = bucket_blocks;
    stream_of_ = stream_of;
    held_first_ = -1;  // the blocks held were another stream's, or another tensor's
    held_last_ = -2;
    if (plane > capacity_) {  // they grow to the largest plane the thread has drawn for (6 bytes a value of a tile)
      plain_.reset(new uint16_t[static_cast<size_t>(kLanes * plane + 2 * 128)]);
      rows_.reset(static_cast<uint32_t*>(std::aligned_alloc(64, static_cast<size_t>((kLanes * plane * 4 + 63) / 64 * 64))));
      capacity_ = plane;
    }
#if defined(__AVX512BW__)
    if (plane != plane_)
      for (int64_t r = 0; r < 2; ++r)  // rows 2 r and 2 r + 1 of a plane of 2 or 4: lane c of row i is value c plane + i
        for (int64_t j = 0; j < 32; ++j) small_rows_[r][j] = static_cast<uint16_t>((j % 16) * plane + 2 * r + j / 16);
#endif
    plane_ = plane;
    for (int64_t c = 0; c < kLanes; ++c) lane_plane_[c] = static_cast<uint32_t>(c * plane);
  }
  // Makes plain_ hold the blocks [b0, b1], from b0 on. The blocks held from b0 on stay (a tile's
  // last block is often the next one's first); the others are made.
  void hold(int64_t b0, int64_t b1) {
    const bool keeps = b0 >= held_first_ && b0 <= held_last_;
    const int64_t from = keeps ? held_last_ + 1 : b0;  // the first block to make
    if (keeps)
      std::memmove(plain_.get(), plain_.get() + (b0 - held_first_) * 128,
                   static_cast<size_t>((held_last_ - b0 + 1) * 128) * sizeof(uint16_t));
    if (from <= b1) fill_blocks(from, b1, plain_.get() + (from - b0) * 128);
    held_last_ = std::max(b1, from - 1);
    held_first_ = b0;
  }
  // The noise of blocks [b0, b1] (of a bucketed tensor: fill takes one stream by lanes) in plain
  // order into out.
  void fill_blocks(int64_t b0, int64_t b1, uint16_t* out) {
    for (int64_t b = b0; b <= b1;) {  // a run of blocks within one bucket at a time
      const int64_t bucket = b / bucket_blocks_, first = bucket * bucket_blocks_;
      const int64_t last = std::min(b1, first + bucket_blocks_ - 1);
      const QuantNoise bucket_noise{noise_.seed, stream_of_(noise_.stream, static_cast<uint64_t>(bucket))};
      group_simd::fill_noise_blocks(bucket_noise, b - first, last - first, out + (b - b0) * 128);
      b = last + 1;
    }
  }
#if defined(__AVX2__) && !defined(__AVX512BW__)
  // A tile of planes of 1, 2 or 4 values (1 x 1, 1 x 2, 2 x 2): src (lanes, plane) into rows
  // (plane, lanes) by permutes of 32-bit lanes. Value by value, as the loop below goes, these
  // tiles' noise took a third of the 3-bit quantize of 2 x 2 planes (perf, AVX2 EPYC).
  const uint32_t* fill_small(const uint16_t* src, uint32_t* rows) const {
    using I = Lanes::I;
    if (plane_ == 1) {
      Lanes::store(rows, Lanes::widen16(src));
    } else if (plane_ == 2) {  // a register a row of 4 lanes' planes: their value 0, then their value 1
      const I pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
      const I low = _mm256_permutevar8x32_epi32(Lanes::widen16(src), pick);        // lanes 0-3
      const I high = _mm256_permutevar8x32_epi32(Lanes::widen16(src + 8), pick);   // lanes 4-7
      Lanes::store(rows, _mm256_permute2x128_si256(low, high, 0x20));
      Lanes::store(rows + kLanes, _mm256_permute2x128_si256(low, high, 0x31));
    } else {  // plane 4: register j holds lanes 2j and 2j + 1, their values i side by side (64 bits a row)
      const I pick = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
      I pairs[4];  // (4 lane pairs): 64-bit element i the pair's row i
      for (int j = 0; j < 4; ++j) pairs[j] = _mm256_permutevar8x32_epi32(Lanes::widen16(src + 8 * j), pick);
      // 128-bit halves: rows 0 and 2 (lanes 0-3 | lanes 4-7), rows 1 and 3
      const I even03 = _mm256_unpacklo_epi64(pairs[0], pairs[1]), even47 = _mm256_unpacklo_epi64(pairs[2], pairs[3]);
      const I odd03 = _mm256_unpackhi_epi64(pairs[0], pairs[1]), odd47 = _mm256_unpackhi_epi64(pairs[2], pairs[3]);
      Lanes::store(rows, _mm256_permute2x128_si256(even03, even47, 0x20));
      Lanes::store(rows + kLanes, _mm256_permute2x128_si256(odd03, odd47, 0x20));
      Lanes::store(rows + 2 * kLanes, _mm256_permute2x128_si256(even03, even47, 0x31));
      Lanes::store(rows + 3 * kLanes, _mm256_permute2x128_si256(odd03, odd47, 0x31));
    }
    return rows;
  }
#endif
  // A tile of one stream, its rows made lane by lane: lane c's plane is the plain elements p = e0
  // + c plane + i, whose noise is half p % 2 of word p / 2 (rounding_noise16). With an even plane
  // (every lane's first element even), a hash of the lanes' words gives two rows, its low halves
  // and its high halves; with an odd one, a row, each lane taking its word's half by its parity.
  // No plain-order copy to transpose: with the noise's earlier layout (a word's halves 16 elements
  // apart) that copy, its 16-bit packs and its 8 x 8 transposes were two thirds of fill's time in
  // perf (the 2-bit EfficientNet step, AVX2 EPYC).
  const uint32_t* fill_by_lanes(int64_t e0) {
    uint32_t* rows = rows_.get();
    const uint64_t first = static_cast<uint64_t>(e0), end = first + static_cast<uint64_t>(kLanes * plane_);
    // Element by element where the words' high half changes within the tile, or c plane passes 32 bits.
    if (((first >> 1) >> 32) != (((end - 1) >> 1) >> 32) || kLanes * plane_ >= (int64_t{1} << 31)) {
      for (int64_t i = 0; i < plane_; ++i)
        for (int64_t c = 0; c < kLanes; ++c)
          rows[i * kLanes + c] = noise_half(key_, first + static_cast<uint64_t>(c * plane_ + i));
      return rows;
    }
    // The key and the plane in locals: read through `this`, they were loaded again after every
    // store of a row (a store may alias the object), with the broadcasts of the key (perf).
    const NoiseKey key = key_;
    const int64_t plane = plane_;
    const Words hi = Words{} + static_cast<uint32_t>((first >> 1) >> 32);
    // lane c's first element is first + c plane: its word (low 32 bits) and, where it is odd, 16
    const Words from_first = lane_plane_ + static_cast<uint32_t>(first & 1);  // (first % 2) + c plane
    Words lo = (Words{} + static_cast<uint32_t>(first >> 1)) + (from_first >> 1);
    if (plane % 2 == 0 && first % 2 == 0) {
      int64_t i = 0;
      // rows i .. i + 3 from two hashes at a time: two independent chains of multiplies in flight
      for (; i + 4 <= plane; i += 4, lo += 2u) {
        const Words w0 = noise_hash(key, lo, hi), w1 = noise_hash(key, lo + 1u, hi);
        const Words r0 = w0 & 0xFFFFu, r1 = w0 >> 16, r2 = w1 & 0xFFFFu, r3 = w1 >> 16;
        std::memcpy(rows + i * kLanes, &r0, sizeof r0);
        std::memcpy(rows + (i + 1) * kLanes, &r1, sizeof r1);
        std::memcpy(rows + (i + 2) * kLanes, &r2, sizeof r2);
        std::memcpy(rows + (i + 3) * kLanes, &r3, sizeof r3);
      }
      if (i < plane) {  // rows i and i + 1
        const Words w = noise_hash(key, lo, hi);
        const Words low = w & 0xFFFFu, high = w >> 16;
        std::memcpy(rows + i * kLanes, &low, sizeof low);
        std::memcpy(rows + (i + 1) * kLanes, &high, sizeof high);
      }
      return rows;
    }
    Words shift = (from_first & 1u) << 4;
    for (int64_t i = 0; i < plane; ++i) {
      const Words w = (noise_hash(key, lo, hi) >> shift) & 0xFFFFu;
      std::memcpy(rows + i * kLanes, &w, sizeof w);
      lo += shift >> 4;  // past a high half, the next word
      shift ^= 16u;
    }
    return rows;
  }
  using Words = uint32_t __attribute__((vector_size(4 * kLanes)));  // (lanes,)
  QuantNoise noise_{};
  NoiseKey key_{};  // noise_'s
  Words lane_plane_{};  // lane c: c plane_
  int64_t plane_ = 0;
  int64_t bucket_blocks_ = 0;  // 0: one stream
  StreamOf stream_of_ = nullptr;
  int64_t held_first_ = -1, held_last_ = -2;  // the blocks plain_ holds: [held_first_, held_last_]
  int64_t capacity_ = 0;  // the largest plane the buffers hold a tile of
  std::unique_ptr<uint16_t[]> plain_;  // (blocks covering a tile, 128): the plain order
  std::unique_ptr<uint32_t[], decltype(&std::free)> rows_;  // (plane, lanes), 64-byte aligned
#if defined(__AVX512BW__)
  alignas(64) uint16_t small_rows_[2][32];  // (row pairs, 32): a plane of 2 or 4's permute indices
#endif
};

// The rows' chunks of B-bit codes: kRows rows fill kWords 32-bit words exactly (2 bits: 16 rows a
// word; 3 bits: 32 rows in 3 words).
template <int B>
struct RowChunk {
  static constexpr int kRows = 32 / std::gcd(B, 32), kWords = B * kRows / 32;
};
// Code K of a chunk of rows (B bits each, kWords words: w) put at its bits [B K, B K + B), the
// part past a word's end at the start of the next.
template <int B, int K, int kWords>
inline void put_code(Lanes::I (&w)[kWords], Lanes::I code) {
  constexpr int bit = B * K, word = bit / 32, off = bit % 32;
  w[word] = Lanes::bit_or(w[word], Lanes::shl<off>(code));
  if constexpr (off + B > 32) w[word + 1] = Lanes::bit_or(w[word + 1], Lanes::shr<32 - off>(code));
}
// Code K of such a chunk, from its words w (mask: 2^B - 1 in every lane).
template <int B, int K, int kWords>
inline Lanes::I get_code(const Lanes::I (&w)[kWords], Lanes::I mask) {
  constexpr int bit = B * K, word = bit / 32, off = bit % 32;
  Lanes::I code = Lanes::shr<off>(w[word]);
  if constexpr (off + B > 32) code = Lanes::bit_or(code, Lanes::shl<32 - off>(w[word + 1]));
  return Lanes::bit_and(code, mask);
}

// The codes of `len` rows of lanes (rows[i * kLanes + c]: value i of lane c's group), code_of(values,
// uniforms) lane by lane with the rows' noise rnd (uniform16 of it; null: 0.5, nearest), packed
// into the lanes' streams (code i of lane c at bits [B i, B i + B): word w at words[w * kLanes + c]).
// rows lie `stride` values apart (kLanes in a blocked buffer, C in an NHWC one).
// Everything the rows' code reads is held by value and the noise's presence is a template argument:
// captured by reference, the lanes' min and scale were reloaded from the stack after every store
// (an intrinsic's store may alias anything), and `rnd` tested, each row. The callable comes by
// const reference and is copied into the row lambda: taken by value, GCC 12 kept the per-plane
// quantize's range-scan minimum on the stack (a store and a load a row). The row walkers are forced
// inline: called, their lanes' min and scale went through the stack (dequantize_rows_with<2> left
// its caller once its partial chunk grew it: 1.07-1.11x the time, AVX2 EPYC).
template <int B, bool kNoise, typename T, typename CodeOf>
__attribute__((always_inline)) inline void quantize_rows_of(const T* rows, int64_t stride, int64_t len,
                                                            const uint32_t* rnd, uint32_t* words,
                                                            const CodeOf& code_of_values) {
  using F = Lanes::F;
  using I = Lanes::I;
  // The rows two groups on, asked for now: the range scan before this is the first read of a tile
  // that has left the caches (a quarter of the 1-bit quantize waited there, perf, Zen 4).
  // A prefetch never faults: past the buffer's end it asks for nothing.
  const char* ahead = reinterpret_cast<const char*>(rows + 2 * len * stride);
  auto code_of = [=](int64_t i) __attribute__((always_inline)) {  // row i's codes, lane by lane
    _mm_prefetch(ahead + i * stride * static_cast<int64_t>(sizeof(T)), _MM_HINT_T0);
    F r = Lanes::set(0.5f);
    if constexpr (kNoise) r = group_simd::uniform16_lanes(Lanes::load(rnd + i * kLanes));
    return code_of_values(Lanes::load(rows + i * stride), r);
  };
  int64_t i = 0;
  // 32 / gcd(B, 32) rows at a time into their B / gcd(B, 32) words (2 bits: 16 rows a word; 3 bits:
  // 32 rows in 3 words), each code's word and shifts constants (put_code). Row by row, each
  // row's count moved into a vector register and a branch storing a word when full took about a
  // tenth of the per-plane quantize in perf; with this and store_lane_meta the nearest-rounding
  // 2-bit quantize of 14 x 14 planes ran in 0.8x the time.
  constexpr int kRows = RowChunk<B>::kRows, kWords = RowChunk<B>::kWords;
  for (; i + kRows <= len; i += kRows) {
    I w[kWords];  // (kWords,): the chunk's words
    for (int k = 0; k < kWords; ++k) w[k] = Lanes::zero();
    [&]<int... K>(std::integer_sequence<int, K...>) __attribute__((always_inline)) {
      (put_code<B, K>(w, code_of(i + K)), ...);
    }(std::make_integer_sequence<int, kRows>{});
    for (int k = 0; k < kWords; ++k) Lanes::store(words + (i * B / 32 + k) * kLanes, w[k]);
  }
  // A last partial chunk (per-plane groups of 25 or 28 rows are one, at 1 and 3 bits): its rows by
  // the same constant shifts, row K only where K < rem; its words up to its last code's. Row by
  // row, as they went before, such rows were most of the 1-bit dequantize's time (perf, 14 x 14
  // planes, AVX2 EPYC).
  if (const int64_t rem = len - i; rem > 0) {
    I w[kWords];  // (kWords,)
    for (int k = 0; k < kWords; ++k) w[k] = Lanes::zero();
    [&]<int... K>(std::integer_sequence<int, K...>) __attribute__((always_inline)) {
      ((K < rem ? put_code<B, K>(w, code_of(i + K)) : void()), ...);
    }(std::make_integer_sequence<int, kRows>{});
    for (int64_t k = 0; k < (B * rem + 31) / 32; ++k) Lanes::store(words + (i * B / 32 + k) * kLanes, w[k]);
  }
}
template <int B, typename T, typename CodeOf>
__attribute__((always_inline)) inline void quantize_rows_with(const T* rows, int64_t stride, int64_t len,
                                                              const uint32_t* rnd, uint32_t* words,
                                                              const CodeOf& code_of_values) {
  if (rnd) return quantize_rows_of<B, true>(rows, stride, len, rnd, words, code_of_values);
  quantize_rows_of<B, false>(rows, stride, len, rnd, words, code_of_values);
}

// Rows [i0, len) of lanes `stride` values apart scanned into the lanes' running ranges vmn and vmx,
// lane by lane the plain scan's order and NaN rule (group_range's).
template <typename T>
inline void scan_lane_ranges(const T* rows, int64_t stride, int64_t i0, int64_t len, Lanes::F& vmn, Lanes::F& vmx) {
  for (int64_t i = i0; i < len; ++i) {
    const Lanes::F v = Lanes::load(rows + i * stride);
    vmn = Lanes::min(v, vmn);  // the second operand where either is NaN: the scan's rule
    vmx = Lanes::max(v, vmx);
  }
}

// The lanes' ranges of `len` rows `stride` values apart into mn and mx (kLanes each), each lane's
// scan from its first row.
template <typename T>
inline void lane_ranges(const T* rows, int64_t stride, int64_t len, float* mn, float* mx) {
  Lanes::F vmn = Lanes::load(rows), vmx = vmn;
  scan_lane_ranges(rows, stride, 1, len, vmn, vmx);
  Lanes::store(mn, vmn);
  Lanes::store(mx, vmx);
}

// quantize_rows_with quantize_value's arithmetic lane by lane, with the lanes' vmin and vinv.
template <int B, typename T>
__attribute__((always_inline)) inline void quantize_rows(const T* rows, int64_t stride, int64_t len, Lanes::F vmin,
                                                         Lanes::F vinv, const uint32_t* rnd, uint32_t* words) {
  if constexpr (B == 1) {
    // quantize_value's code at one level: 1 where r < u. (u >= 1 rounds to 1, as r < 1; u below 0
    // or NaN to 0, as the clamp to 0 does.) Three instructions a row fewer than the general
    // arithmetic's truncation, conversion and clamp.
    quantize_rows_with<B>(rows, stride, len, rnd, words, [=](Lanes::F x, Lanes::F r) __attribute__((always_inline)) {
      return Lanes::one_where_less(r, Lanes::mul(Lanes::sub(x, vmin), vinv));
    });
    return;
  }
  const Lanes::F zero = Lanes::set(0.0f);
  const Lanes::I vlev = Lanes::set(static_cast<int>((1u << B) - 1u));
  quantize_rows_with<B>(rows, stride, len, rnd, words, [=](Lanes::F x, Lanes::F r) __attribute__((always_inline)) {
    const Lanes::F u = Lanes::max(Lanes::mul(Lanes::sub(x, vmin), vinv), zero);
    const Lanes::F fl = Lanes::trunc(u);
    return Lanes::min(Lanes::round_up(Lanes::to_int(fl), r, Lanes::sub(u, fl)), vlev);
  });
}

// The values of `len` rows of lanes from the lanes' streams in `words` (quantize_rows' layout):
// value_of(codes) lane by lane, into rows (f32 or bf16, T, rounded as Tensor::to rounds).
template <int B, typename T, typename ValueOf>
__attribute__((always_inline)) inline void dequantize_rows_with(const uint32_t* words, int64_t len, T* rows,
                                                                int64_t stride, ValueOf value_of) {
  using I = Lanes::I;
  const I mask = Lanes::set((1 << B) - 1);
  int64_t i = 0;
  constexpr int kRows = RowChunk<B>::kRows, kWords = RowChunk<B>::kWords;  // as quantize_rows_of's chunks
  for (; i + kRows <= len; i += kRows) {
    I w[kWords];  // (kWords,)
    for (int k = 0; k < kWords; ++k) w[k] = Lanes::load(words + (i * B / 32 + k) * kLanes);
    [&]<int... K>(std::integer_sequence<int, K...>) __attribute__((always_inline)) {
      ((Lanes::store(rows + (i + K) * stride, value_of(get_code<B, K>(w, mask)))), ...);
    }(std::make_integer_sequence<int, kRows>{});
  }
  if (const int64_t rem = len - i; rem > 0) {  // a last partial chunk, as quantize_rows_of's
    const int64_t used = (B * rem + 31) / 32;  // its words: the others were never written
    I w[kWords];
    for (int k = 0; k < kWords; ++k) w[k] = k < used ? Lanes::load(words + (i * B / 32 + k) * kLanes) : Lanes::zero();
    [&]<int... K>(std::integer_sequence<int, K...>) __attribute__((always_inline)) {
      ((K < rem ? Lanes::store(rows + (i + K) * stride, value_of(get_code<B, K>(w, mask))) : void()), ...);
    }(std::make_integer_sequence<int, kRows>{});
  }
}

// dequantize_rows_with dequantize_value lane by lane, with the lanes' vmin and vstep.
template <int B, typename T>
__attribute__((always_inline)) inline void dequantize_rows(const uint32_t* words, int64_t len, Lanes::F vmin,
                                                           Lanes::F vstep, T* rows, int64_t stride) {
  dequantize_rows_with<B>(words, len, rows, stride, [=](Lanes::I code) __attribute__((always_inline)) {
    return Lanes::fmadd(Lanes::to_float(code), vstep, vmin);  // as dequantize_value
  });
}

// Quantizes the per-plane groups g (tile_geometry) of a blocked buffer x, f32 or bf16 (T): the
// codes, metadata and group_range_sq of quantize_groups.
template <int B, typename T>
void quantize(const T* x, const GroupGeometry& g, const CodecWalk& walk, Rounding rounding, const QuantNoise& noise,
              uint8_t* codes, uint8_t* meta, double* range_sq) {
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, gps = g.groups_per_span;
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  const bool stochastic = rounding == Rounding::Stochastic;
  for_tile_ranges(g.spans / kLanes, tile_elements, [&](int64_t t0, int64_t t1) {
    TileNoise* tile_noise = stochastic ? &TileNoise::of_thread(noise, plane) : nullptr;
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t t = t0; t < t1; ++t) {
      const T* tile = x + place.start(t);  // (plane, lanes), rows `stride` apart
      const uint32_t* rnd = stochastic ? tile_noise->fill(t * tile_elements) : nullptr;  // (plane, lanes)
      for (int64_t j = 0; j < gps; ++j) {
        const GroupGeometry::Place at = g.place_in(t * kLanes, j);  // lane 0's group; lane c's is span lanes t + c
        const int64_t s0 = at.start - t * kLanes * plane, len = at.len;
        const T* rows = tile + s0 * stride;  // (len, lanes)
        alignas(64) float mn[kLanes], mx[kLanes], pmin[kLanes], pstep[kLanes], pinv[kLanes];
        lane_ranges(rows, stride, len, mn, mx);
        lane_group_params<B>(mn, mx, g.meta, pmin, pstep, pinv);
        uint8_t* lane_meta = meta + ((t * kLanes) * gps + j) * meta_size;  // lane c's: gps records on
        store_lane_meta(pmin, pstep, g.meta, lane_meta, gps * meta_size);
        if (range_sq)
          for (int64_t c = 0; c < kLanes; ++c)
            range_sq[(t * kLanes + c) * gps + j] = group_range_sq(GroupParams{pmin[c], pstep[c], pinv[c]}, len, B);
        // lane c's noise: elements s0 .. s0 + len - 1 of its plane
        quantize_rows<B>(rows, stride, len, Lanes::load(pmin), Lanes::load(pinv), rnd ? rnd + s0 * kLanes : nullptr,
                         words->words);
        // Lane c's codes: span t lanes + c's, span_bytes apart. A last partial word may go out
        // whole where the next group of the span, written after this one, covers the bytes past it.
        const int64_t bytes = packed_bytes(len, B), span_bytes = g.span_bytes();
        const bool may_spill = j + 1 < gps && packed_bytes(g.place_in(0, j + 1).len, B) >= 3;
        uint8_t* lane_codes = codes + g.place_in(t * kLanes, j).code_offset;
        for (int64_t c = 0; c < kLanes; ++c) words->copy_out(c, bytes, lane_codes + c * span_bytes, may_spill);
      }
    }
  });
}

// Dequantizes them back into a blocked buffer out, f32 or bf16 (T, rounded as Tensor::to rounds):
// dequantize_groups' values.
template <int B, typename T>
void dequantize(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, const CodecWalk& walk, T* out) {
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, gps = g.groups_per_span;
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  const int64_t span_bytes = g.span_bytes(), code_bytes = g.code_bytes();
  for_tile_ranges(g.spans / kLanes, tile_elements, [&](int64_t t0, int64_t t1) {
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t t = t0; t < t1; ++t) {
      T* tile = out + place.start(t);  // (plane, lanes), rows `stride` apart
      for (int64_t j = 0; j < gps; ++j) {
        const GroupGeometry::Place at = g.place_in(t * kLanes, j);
        const int64_t s0 = at.start - t * kLanes * plane, len = at.len, bytes = packed_bytes(len, B);
        Lanes::F vmin, vstep;
        load_lane_meta(meta + ((t * kLanes) * gps + j) * meta_size, gps * meta_size, g.meta, vmin, vstep);
        // the lanes' codes and metadata a cache line on (8 groups of 32 at 2 bits, 16 records)
        prefetch_lanes(codes + at.code_offset + 64, span_bytes);
        prefetch_lanes(meta + ((t * kLanes) * gps + j) * meta_size + 64, gps * meta_size);
        // lane c's codes: span t lanes + c's, span_bytes apart; the last lane's may be the buffer's last
        const int64_t last_lane_end = at.code_offset + (kLanes - 1) * span_bytes + bytes;
        words->gather_in(bytes, codes + at.code_offset, span_bytes, last_lane_end + 3 <= code_bytes);
        dequantize_rows<B>(words->words, len, vmin, vstep, tile + s0 * stride, stride);
      }
    }
  });
}

#endif  // PACKRAT_PLANE_TILES

}  // namespace packrat::plane_tiles

#pragma GCC diagnostic pop
