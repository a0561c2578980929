#pragma once
// Groups of whole channel planes in a channel-blocked buffer, k planes a group: what per_plane
// grouping makes of planes smaller than a group (EfficientNet's and ResNet's 4x4 and 2x2 planes,
// groups of 32: k = 2 and 8), and per-sample groups that hold whole planes. The tile is
// plane_tiles.h's, one sample's kLanes channels lying (plane, lanes), and a group is k adjacent
// lanes of all its rows (k dividing the lanes), so the tiles' row-by-row walk takes them too:
//   - their ranges: each lane scanned row by row from its group's first value, then the k lanes
//     combined in plain order (min(later, earlier): MINPS keeps the second, the earlier, on a tie
//     or a NaN), which gives the plain scan's result bit for bit: the earliest of the extreme
//     values, so the sign of a zero extreme, and a NaN only where the first value is one;
//   - their codes: quantize_value's arithmetic lane by lane, as the per-plane tiles do; a lane's
//     plane is codes [p plane, (p + 1) plane) of its group (p: its place in the group), so the tile's
//     code bytes are its lanes' streams one after the other where a lane's stream is whole bytes.
// Before them these groups took the plain walk through PlainRuns' transposes, a group at a time:
// 0.67 and 1.0 ns a value (2x2 and 4x4 planes, 2 threads) against the tiles' 0.36-0.40.
// Groups of more planes than a tile has lanes (k a multiple of them: ActNN's per-sample groups of
// 256 on 4x4 planes with 8 lanes, on 2x2 planes with 8 or 16) are m = k / lanes whole tiles in a
// row (quantize_whole_tiles): each tile's lanes combined as above, the tiles' ranges in order.
// Internal: included by group_quant_cpu.cpp (it includes immintrin.h through plane_tiles.h).
#include <bit>
#include <cstdint>
#include <cstring>

#include "quant/cpu/plane_tiles.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::plane_tiles {

constexpr int64_t kMaxLaneBytes = 8;  // a lane's stream stored and loaded in one 64-bit word; longer: LaneWords'
constexpr int64_t kMaxBitLane = 56;  // a lane's stream not whole bytes: its bits and a byte's pending fit 64

// Whether g's groups are groups of k >= 2 whole planes of a blocked buffer whose tiles are this
// CPU's rows, k dividing the tiles' lanes or a multiple of them (groups of whole tiles), every
// group full and its codes whole bytes; a lane's codes whole bytes, or up to kMaxBitLane bits
// (store_lane_bits: 3 bits on 2 x 2 planes, GACT's odd widths on 1 x 1).
inline bool applies_whole_planes(const GroupGeometry& g, const CodecWalk& walk) {
#if defined(PACKRAT_PLANE_TILES)
  if (!walks_tiles(walk)) return false;
  const int64_t plane = walk.plane, k = g.group_size / plane, lane_bits = g.bits * plane;
  return g.group_size % plane == 0 && k >= 2 && (kLanes % k == 0 || k % kLanes == 0) &&
         g.span_len == walk.channels * plane && g.spans * g.span_len == g.numel && g.tail_len == g.group_size &&
         (lane_bits % 8 == 0 || (lane_bits <= kMaxBitLane && g.group_size * g.bits % 8 == 0)) &&
         g.group_size <= kMaxGroup;
#else
  (void)g, (void)walk;
  return false;
#endif
}

#if defined(PACKRAT_PLANE_TILES)

// Lane permutations of groups of k lanes: `first`, each lane its group's first lane; `next[l]`,
// each lane the lane 2^l on (the partner of a combining step).
struct GroupLanes {
  explicit GroupLanes(int64_t k) : k(k) {
    for (int64_t c = 0; c < kLanes; ++c) {
      first_lane[c] = static_cast<uint32_t>(c - c % k);
      for (int l = 0; l < kLevels; ++l) next_lane[l][c] = static_cast<uint32_t>((c + (int64_t{1} << l)) % kLanes);
    }
  }
  Lanes::I first() const { return Lanes::load(first_lane); }
  Lanes::I next(int level) const { return Lanes::load(next_lane[level]); }

  // The range of each lane's group, in every lane of it: lane scans mn, mx (each from the group's
  // first value) combined 1, 2, 4 ... lanes apart, in plain order, into the group's first lane.
  void combine(Lanes::F& mn, Lanes::F& mx) const {
    for (int l = 0; (int64_t{1} << l) < k; ++l) {
      const Lanes::I on = next(l);
      mn = Lanes::min(Lanes::permute(mn, on), mn);  // the earlier lanes' on a tie or a NaN
      mx = Lanes::max(Lanes::permute(mx, on), mx);
    }
    mn = Lanes::permute(mn, first());
    mx = Lanes::permute(mx, first());
  }

  // The range of each lane's group over a tile's `plane` rows (`stride` apart), in every lane of
  // it: each lane scanned from `from` (its group's first value), then combined.
  template <typename T>
  void ranges(const T* rows, int64_t stride, int64_t plane, Lanes::F from, Lanes::F& mn, Lanes::F& mx) const {
    mn = from, mx = from;
    scan_lane_ranges(rows, stride, 0, plane, mn, mx);
    combine(mn, mx);
  }

  static constexpr int kLevels = 4;  // up to 16 lanes a group
  int64_t k;
  alignas(64) uint32_t first_lane[kLanes];
  alignas(64) uint32_t next_lane[kLevels][kLanes];
};

#if defined(__AVX512F__)
// Streams of 1, 2, 4 or 8 bytes a lane, the 16 lanes' in one register or two, narrowed or
// interleaved in it: the byte-by-byte moves below, stored to `words` and read back as a register,
// wait on the stores (the 4-bit bucket dequantize of 2 x 2 planes ran 1.9x faster without them,
// BM_MixedQuant_BlockedPlanes). false: another length.
inline bool store_lane_streams_whole(const LaneWords& words, int64_t lane_bytes, uint8_t* dst) {
  const __m512i w = _mm512_load_si512(words.words);  // word 0 of each lane (its bits past the stream zero)
  switch (lane_bytes) {
    case 1: _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(w)); return true;
    case 2: _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(w)); return true;
    case 4: _mm512_storeu_si512(dst, w); return true;
    case 8: {  // lane c: words c and 16 + c, one 64-bit value
      const __m512i hi = _mm512_load_si512(words.words + kLanes);
      const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(8));
      _mm512_storeu_si512(dst, _mm512_permutex2var_epi32(w, lo_idx, hi));
      _mm512_storeu_si512(dst + 64, _mm512_permutex2var_epi32(w, hi_idx, hi));
      return true;
    }
    default: return false;
  }
}
inline bool load_lane_streams_whole(const uint8_t* src, int64_t lane_bytes, LaneWords& words) {
  switch (lane_bytes) {
    case 1: Lanes::store(words.words, _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)))); return true;
    case 2: Lanes::store(words.words, _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)))); return true;
    case 4: Lanes::store(words.words, _mm512_loadu_si512(src)); return true;
    case 8: {  // lane c's 64-bit value: its words c (low) and 16 + c (high)
      const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 64);
      Lanes::store(words.words, simd::low_words(a, b));
      Lanes::store(words.words + kLanes, simd::low_words(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32)));
      return true;
    }
    default: return false;
  }
}
#endif

// Lane c's stream of lane_bits bits (word 0 of `words`' lane c, and word 1 past 32 bits; its bits past
// the stream zero) at bit c lane_bits of dst, for every lane, where lane_bits is not whole bytes (at
// most kMaxBitLane): the tile's streams one after the other, as the plain tensor's codes lie. The
// tile's bits are whole bytes (kLanes lanes of them), written once each.
inline void store_lane_bits(const LaneWords& words, int64_t lane_bits, uint8_t* dst) {
  uint64_t pending = 0;  // the bits not yet written, the first in bit 0
  int64_t held = 0;      // how many (under 8 between lanes)
  for (int64_t c = 0; c < kLanes; ++c) {
    pending |= (words.words[c] | (lane_bits > 32 ? uint64_t{words.words[kLanes + c]} << 32 : 0)) << held;
    for (held += lane_bits; held >= 8; held -= 8, pending >>= 8) *dst++ = static_cast<uint8_t>(pending);
  }
}
// The reverse: lane c's stream from bit c lane_bits of src into `words` (its bits past it zero).
inline void load_lane_bits(const uint8_t* src, int64_t lane_bits, LaneWords& words) {
  const uint64_t keep = (uint64_t{1} << lane_bits) - 1;
  uint64_t pending = 0;  // the bits read and not yet a lane's, the first in bit 0
  int64_t held = 0;
  for (int64_t c = 0; c < kLanes; ++c) {
    for (; held < lane_bits; held += 8) pending |= uint64_t{*src++} << held;
    const uint64_t v = pending & keep;
    pending >>= lane_bits;
    held -= lane_bits;
    words.words[c] = static_cast<uint32_t>(v);
    words.words[kLanes + c] = static_cast<uint32_t>(v >> 32);
  }
}

// Lane c's stream of lane_bits bits at bit c lane_bits of dst, for every lane. Whole bytes (lane c's at
// dst + c lane_bits / 8): 8-byte stores whose bytes past a lane's are the next lane's (written
// after), bytes one by one where 8 would reach past the tile's.
inline void store_lane_streams(const LaneWords& words, int64_t lane_bits, uint8_t* dst) {
  if (lane_bits % 8 != 0) return store_lane_bits(words, lane_bits, dst);
  const int64_t lane_bytes = lane_bits / 8;
#if defined(__AVX512F__)
  if (store_lane_streams_whole(words, lane_bytes, dst)) return;
#endif
  if (lane_bytes > kMaxLaneBytes) {  // 8x8 planes at 4 bits: 32 bytes a lane
    for (int64_t c = 0; c < kLanes; ++c) words.copy_out(c, lane_bytes, dst + c * lane_bytes);
    return;
  }
  for (int64_t c = 0; c < kLanes; ++c) {
    const uint64_t s = words.words[c] | (lane_bytes > 4 ? uint64_t{words.words[kLanes + c]} << 32 : 0);
    uint8_t* d = dst + c * lane_bytes;
    if (c * lane_bytes + 8 <= kLanes * lane_bytes) {
      std::memcpy(d, &s, 8);
    } else {
      for (int64_t b = 0; b < lane_bytes; ++b) d[b] = static_cast<uint8_t>(s >> (8 * b));
    }
  }
}
// The reverse: lane c's stream from bit c lane_bits of src into `words` (its bits past it zero).
inline void load_lane_streams(const uint8_t* src, int64_t lane_bits, LaneWords& words) {
  if (lane_bits % 8 != 0) return load_lane_bits(src, lane_bits, words);
  const int64_t lane_bytes = lane_bits / 8;
#if defined(__AVX512F__)
  if (load_lane_streams_whole(src, lane_bytes, words)) return;
#endif
  if (lane_bytes > kMaxLaneBytes) {
    for (int64_t c = 0; c < kLanes; ++c) words.copy_in(c, lane_bytes, src + c * lane_bytes);
    return;
  }
  const uint64_t keep = lane_bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * lane_bytes)) - 1;
  for (int64_t c = 0; c < kLanes; ++c) {
    const uint8_t* s = src + c * lane_bytes;
    uint64_t v = 0;
    if (c * lane_bytes + 8 <= kLanes * lane_bytes) {
      std::memcpy(&v, s, 8);
      v &= keep;
    } else {
      for (int64_t b = 0; b < lane_bytes; ++b) v |= uint64_t{s[b]} << (8 * b);
    }
    words.words[c] = static_cast<uint32_t>(v);
    words.words[kLanes + c] = static_cast<uint32_t>(v >> 32);
  }
}

// Groups of m >= 2 whole tiles (k = m kLanes planes), tile t's lanes the group's planes
// (t % m) kLanes + c: quantize_whole_planes for them. A group's range: each tile's lanes scanned
// from the group's first value and combined as a tile's groups are, then the tiles' ranges in
// order (min(later, earlier), as the lanes'); its codes: each tile's lane streams at their places.
template <int B, typename T>
void quantize_whole_tiles(const T* x, const GroupGeometry& g, const CodecWalk& walk, Rounding rounding,
                          const QuantNoise& noise, uint8_t* codes, uint8_t* meta, double* range_sq) {
  using F = Lanes::F;
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, m = g.group_size / tile_elements;
  const int64_t tile_bytes = kLanes * B * plane / 8, group_bytes = g.full_group_bytes();  // whole bytes
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  const bool stochastic = rounding == Rounding::Stochastic;
  const GroupLanes lanes(kLanes);  // a tile's lanes, all of one group
  for_tile_ranges(g.groups(), g.group_size, [&](int64_t g0, int64_t g1) {
    TileNoise* tile_noise = stochastic ? &TileNoise::of_thread(noise, plane) : nullptr;
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t gi = g0; gi < g1; ++gi) {
      const int64_t t0 = gi * m;  // the group's first tile
      const F first = Lanes::permute(Lanes::load(x + place.start(t0)), lanes.first());  // the group's first value
      F gmn = first, gmx = first;
      for (int64_t j = 0; j < m; ++j) {
        F vmn, vmx;
        lanes.ranges(x + place.start(t0 + j), stride, plane, first, vmn, vmx);
        gmn = Lanes::min(vmn, gmn);  // the earlier tiles' on a tie or a NaN
        gmx = Lanes::max(vmx, gmx);
      }
      alignas(64) float mn[kLanes], mx[kLanes], pmin[kLanes], pstep[kLanes], pinv[kLanes];
      Lanes::store(mn, gmn);
      Lanes::store(mx, gmx);
      lane_group_params<B>(mn, mx, g.meta, pmin, pstep, pinv);  // every lane the group's
      const GroupParams p{pmin[0], pstep[0], pinv[0]};
      store_group_meta(p, g.meta, meta + gi * meta_size);
      if (range_sq) range_sq[gi] = group_range_sq(p, g.group_size, B);
      const F vmin = Lanes::set(p.min), vinv = Lanes::set(p.inv_step);
      for (int64_t j = 0; j < m; ++j) {
        const uint32_t* rnd = stochastic ? tile_noise->fill((t0 + j) * tile_elements) : nullptr;  // (plane, lanes)
        quantize_rows<B>(x + place.start(t0 + j), stride, plane, vmin, vinv, rnd, words->words);
        store_lane_streams(*words, B * plane, codes + gi * group_bytes + j * tile_bytes);
      }
    }
  });
}

// Quantizes the groups of whole planes of a blocked (or NHWC) buffer x (applies_whole_planes(g, walk)), f32
// or bf16 (T): the codes, metadata and group_range_sq of quantize_groups.
template <int B, typename T>
void quantize_whole_planes(const T* x, const GroupGeometry& g, const CodecWalk& walk, Rounding rounding,
                           const QuantNoise& noise, uint8_t* codes, uint8_t* meta, double* range_sq) {
  using F = Lanes::F;
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, k = g.group_size / plane;
  if (k > kLanes) return quantize_whole_tiles<B>(x, g, walk, rounding, noise, codes, meta, range_sq);
  const int64_t lane_bits = B * plane, tile_groups = kLanes / k, group_bytes = g.full_group_bytes();
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  const bool stochastic = rounding == Rounding::Stochastic;
  const GroupLanes lanes(k);
  for_tile_ranges(g.numel / tile_elements, tile_elements, [&](int64_t t0, int64_t t1) {
    TileNoise* tile_noise = stochastic ? &TileNoise::of_thread(noise, plane) : nullptr;
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t t = t0; t < t1; ++t) {
      const T* rows = x + place.start(t);  // (plane, lanes), `stride` apart
      const uint32_t* rnd = stochastic ? tile_noise->fill(t * tile_elements) : nullptr;  // (plane, lanes)
      F vmn, vmx;
      lanes.ranges(rows, stride, plane, Lanes::permute(Lanes::load(rows), lanes.first()), vmn, vmx);
      alignas(64) float mn[kLanes], mx[kLanes], pmin[kLanes], pstep[kLanes], pinv[kLanes];
      Lanes::store(mn, vmn);
      Lanes::store(mx, vmx);
      lane_group_params<B>(mn, mx, g.meta, pmin, pstep, pinv);
      const int64_t g0 = t * tile_groups;  // the tile's first group
      for (int64_t q = 0; q < tile_groups; ++q) {
        const GroupParams p{pmin[q * k], pstep[q * k], pinv[q * k]};
        store_group_meta(p, g.meta, meta + (g0 + q) * meta_size);
        if (range_sq) range_sq[g0 + q] = group_range_sq(p, g.group_size, B);
      }
      quantize_rows<B>(rows, stride, plane, Lanes::load(pmin), Lanes::load(pinv), rnd, words->words);
      store_lane_streams(*words, lane_bits, codes + g0 * group_bytes);
    }
  });
}

// quantize_whole_tiles' groups back into out: every lane of a tile its group's params.
template <int B, typename T>
void dequantize_whole_tiles(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, const CodecWalk& walk,
                            T* out) {
  const int64_t plane = walk.plane, m = g.group_size / (kLanes * plane);
  const int64_t tile_bytes = kLanes * B * plane / 8, group_bytes = g.full_group_bytes();  // whole bytes
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  for_tile_ranges(g.groups(), g.group_size, [&](int64_t g0, int64_t g1) {
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t gi = g0; gi < g1; ++gi) {
      const GroupParams p = load_group_range(meta + gi * meta_size, g.meta);
      const Lanes::F vmin = Lanes::set(p.min), vstep = Lanes::set(p.step);
      for (int64_t j = 0; j < m; ++j) {
        load_lane_streams(codes + gi * group_bytes + j * tile_bytes, B * plane, *words);
        dequantize_rows<B>(words->words, plane, vmin, vstep, out + place.start(gi * m + j), stride);
      }
    }
  });
}

// Dequantizes them back into a blocked buffer out, f32 or bf16 (T, rounded as Tensor::to rounds):
// dequantize_groups' values.
template <int B, typename T>
void dequantize_whole_planes(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, const CodecWalk& walk,
                             T* out) {
  const int64_t plane = walk.plane, tile_elements = kLanes * plane, k = g.group_size / plane;
  if (k > kLanes) return dequantize_whole_tiles<B>(codes, meta, g, walk, out);
  const int64_t lane_bits = B * plane, tile_groups = kLanes / k, group_bytes = g.full_group_bytes();
  const TilePlace place = tile_place(walk);
  const int64_t stride = place.row_stride();
  const int meta_size = meta_bytes_per_group(g.meta);
  const int k_shift = std::countr_zero(static_cast<uint64_t>(k));  // k divides the lanes: a power of 2
  for_tile_ranges(g.numel / tile_elements, tile_elements, [&](int64_t t0, int64_t t1) {
    LaneWords* words = &LaneWords::of_thread();
    for (int64_t t = t0; t < t1; ++t) {
      T* rows = out + place.start(t);  // (plane, lanes), `stride` apart
      const int64_t g0 = t * tile_groups;
      Lanes::F vmin, vstep;  // lane c: its group's, c / k
      load_lane_meta(meta + g0 * meta_size, meta_size, g.meta, vmin, vstep, k_shift);
      load_lane_streams(codes + g0 * group_bytes, lane_bits, *words);
      dequantize_rows<B>(words->words, plane, vmin, vstep, rows, stride);
    }
  });
}

#endif  // PACKRAT_PLANE_TILES

}  // namespace packrat::plane_tiles

#pragma GCC diagnostic pop
