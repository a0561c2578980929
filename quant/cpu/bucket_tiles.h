#pragma once
// The mixed codec's buckets (quant/mixed/mixed_quant.h) over a channel-blocked buffer's tiles,
// where every bucket has one width and the max-abs rule, and a bucket is whole channel planes:
// k = bucket / plane planes, k lanes of one tile (16 x 16 and 8 x 8 planes, buckets of 512) or
// k / lanes whole tiles (4 x 4 and 2 x 2). The tile is plane_tiles.h's, one sample's lanes channels
// lying (plane, lanes), so the row-by-row walk takes the buckets' values where they lie:
//   - a bucket's max|x|: each lane's over its rows, then the bucket's lanes' (a max, NaN ignored:
//     any order gives bucket_scale_ref's value);
//   - the codes: quantize_sign_magnitude lane by lane, each lane's plane a whole number of bytes of
//     codes, so the lanes' streams follow one another in plain order (store_lane_streams);
//   - the noise: the plain order's, each bucket's blocks from its own stream (TileNoise's bucket
//     mode), transposed into the tiles' rows.
// Before them a blocked buffer's buckets went through PlainTile's 16 x 16 transposes, to f32 planes
// and back (as much time as the bucket quantize itself in EfficientNetV2-S's bf16 step, perf).
// The bytes are the plain tensor's (tests/quant/mixed_quant_test.cpp).
// Internal: included by mixed_quant_cpu.cpp (it includes immintrin.h through plane_tiles.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "quant/cpu/whole_plane_tiles.h"
#include "quant/mixed/mixed_quant_device.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace packrat::bucket_tiles {

// Code widths the tile kernels are built for (the max-abs rule's 1 to 6 bits a side and 8).
constexpr bool tile_code_bits(int bits) { return (bits >= 2 && bits <= 6) || bits == 8; }

// How a bucketed blocked buffer's tiles hold its buckets: `unit_tiles` tiles a unit of whole
// buckets, `lanes_per_bucket` of a tile's lanes a bucket (all of them where unit_tiles > 1),
// `lane_bytes` of codes a lane's plane. unit_tiles 0: the tile kernels do not apply.
struct BucketTiling {
  int64_t plane = 0, unit_tiles = 0, lanes_per_bucket = 0, lane_bytes = 0;
  bool applies() const { return unit_tiles > 0; }
};

inline BucketTiling bucket_tiling(const BucketGeometry& g, const CodecWalk& walk, int code_bits, ScaleRule rule) {
  BucketTiling t;
#if defined(PACKRAT_PLANE_TILES)
  using plane_tiles::kLanes;
  const int64_t S = g.bucket_size, P = walk.plane;
  if (rule != ScaleRule::MaxAbs || !tile_code_bits(code_bits) || !plane_tiles::walks_tiles(walk) || g.buckets == 0 ||
      g.tail_len != S || S % 128 != 0 || S % P != 0 || (P * code_bits) % 8 != 0 ||
      P * code_bits > plane_tiles::kMaxGroup * 8)
    return t;
  const int64_t k = S / P;  // planes a bucket
  if (k <= kLanes ? kLanes % k != 0 : k % kLanes != 0) return t;
  t.plane = P;
  t.unit_tiles = k <= kLanes ? 1 : k / kLanes;
  t.lanes_per_bucket = std::min(k, kLanes);
  t.lane_bytes = P * code_bits / 8;
#else
  (void)g, (void)walk, (void)code_bits, (void)rule;
#endif
  return t;
}

#if defined(PACKRAT_PLANE_TILES)
using plane_tiles::kLanes;
using plane_tiles::Lanes;

// Calls fn(std::integral_constant<int, CB>) for the tile_code_bits widths.
template <typename Fn>
void dispatch_tile_code_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 2: return fn(std::integral_constant<int, 2>{});
    case 3: return fn(std::integral_constant<int, 3>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    case 5: return fn(std::integral_constant<int, 5>{});
    case 6: return fn(std::integral_constant<int, 6>{});
    case 8: return fn(std::integral_constant<int, 8>{});
    default: fail("bucket tiles: {}-bit codes are not built (tile_code_bits)", bits);
  }
}

// A unit's buckets in turn: bucket q of unit u is the tensor's bucket u * per_unit + q, its lanes
// [q k, q k + k) of each of the unit's tiles.
struct Units {
  int64_t per_unit, lanes;  // buckets a unit, lanes a bucket
  explicit Units(const BucketTiling& t)
      : per_unit(t.unit_tiles > 1 ? 1 : kLanes / t.lanes_per_bucket), lanes(t.lanes_per_bucket) {}
};

// Quantizes the buckets (bucket_tiling(g, walk, ...).applies()) of a blocked buffer x, f32 or bf16
// (T), at one width of `levels` a side: the codes (g.numel values at CB bits, in plain order) and
// metadata quantize_mixed writes for the plain tensor.
template <int CB, typename T>
void quantize(const T* x, const BucketGeometry& g, const BucketTiling& bt, const CodecWalk& walk, uint32_t levels,
              Rounding rounding, const QuantNoise& noise, MetaType meta, uint8_t* codes, uint8_t* meta_out) {
  using F = Lanes::F;
  using I = Lanes::I;
  const int64_t P = bt.plane, U = bt.unit_tiles, tile_elements = kLanes * P;
  const Units units(bt);
  const plane_tiles::TilePlace place = plane_tiles::tile_place(walk);
  const int64_t stride = place.row_stride();
  const int mb = bucket_meta_bytes(ScaleRule::MaxAbs, meta);
  const bool stochastic = rounding == Rounding::Stochastic;
  const F zero = Lanes::set(0.0f), fl_levels = Lanes::set(static_cast<float>(levels));
  const I vlev = Lanes::set(static_cast<int>(levels));
  plane_tiles::for_tile_ranges(g.numel / (U * tile_elements), U * tile_elements, [&](int64_t u0, int64_t u1) {
    plane_tiles::TileNoise* tile_noise =
        stochastic ? &plane_tiles::TileNoise::of_thread(noise, P, g.bucket_size / 128, &bucket_stream) : nullptr;
    plane_tiles::LaneWords* words = &plane_tiles::LaneWords::of_thread();
    for (int64_t u = u0; u < u1; ++u) {
      F amax = zero;  // lane by lane, max|x| over the unit's rows (MAXPS keeps amax where |x| is NaN)
      for (int64_t t = u * U; t < (u + 1) * U; ++t) {
        const T* rows = x + place.start(t);  // (plane, lanes), `stride` apart
        for (int64_t i = 0; i < P; ++i) amax = Lanes::max(Lanes::abs(Lanes::load(rows + i * stride)), amax);
      }
      alignas(64) float lane_max[kLanes], los[kLanes];
      Lanes::store(lane_max, amax);
      for (int64_t q = 0; q < units.per_unit; ++q) {
        float s = 0.0f;
        for (int64_t c = q * units.lanes; c < (q + 1) * units.lanes; ++c) s = max_abs_step(s, lane_max[c]);
        const BucketGrid grid = sign_magnitude_grid(sign_magnitude_scale(s, meta), levels);
        store_bucket_meta(grid, ScaleRule::MaxAbs, meta, meta_out + (u * units.per_unit + q) * mb);
        for (int64_t c = q * units.lanes; c < (q + 1) * units.lanes; ++c) los[c] = grid.levels_over_scale;
      }
      const F vlos = Lanes::load(los);
      for (int64_t t = u * U; t < (u + 1) * U; ++t) {
        const uint32_t* rnd = stochastic ? tile_noise->fill(t * tile_elements) : nullptr;  // (plane, lanes)
        // quantize_sign_magnitude lane by lane (MINPS gives L where |x| los is NaN, as its u < L ? u : L)
        plane_tiles::quantize_rows_with<CB>(
            x + place.start(t), stride, P, rnd, words->words, [=](F v, F r) __attribute__((always_inline)) {
              const F u = Lanes::min(Lanes::mul(Lanes::abs(v), vlos), fl_levels);
              const I fl = Lanes::to_int(u);
              const I m = Lanes::round_up(fl, r, Lanes::sub(u, Lanes::to_float(fl)));
              return Lanes::select(Lanes::less(v, zero), Lanes::sub(vlev, m), Lanes::add(vlev, m));
            });
        plane_tiles::store_lane_streams(*words, 8 * bt.lane_bytes, codes + t * kLanes * bt.lane_bytes);
      }
    }
  });
}

// Dequantizes them back into a blocked buffer out, f32 or bf16 (T, rounded as Tensor::to rounds):
// dequantize_mixed's values.
template <int CB, typename T>
void dequantize(const uint8_t* codes, const uint8_t* meta, const BucketGeometry& g, const BucketTiling& bt,
                const CodecWalk& walk, uint32_t levels, MetaType meta_type, T* out) {
  const int64_t P = bt.plane, U = bt.unit_tiles, tile_elements = kLanes * P;
  const Units units(bt);
  const plane_tiles::TilePlace place = plane_tiles::tile_place(walk);
  const int64_t stride = place.row_stride();
  const int mb = bucket_meta_bytes(ScaleRule::MaxAbs, meta_type);
  const Lanes::I vlev = Lanes::set(static_cast<int>(levels));
  plane_tiles::for_tile_ranges(g.numel / (U * tile_elements), U * tile_elements, [&](int64_t u0, int64_t u1) {
    plane_tiles::LaneWords* words = &plane_tiles::LaneWords::of_thread();
    for (int64_t u = u0; u < u1; ++u) {
      alignas(64) float sol[kLanes];  // lane by lane, its bucket's s / L
      for (int64_t q = 0; q < units.per_unit; ++q) {
        const BucketGrid grid = load_bucket_meta(meta + (u * units.per_unit + q) * mb, ScaleRule::MaxAbs, meta_type, levels);
        for (int64_t c = q * units.lanes; c < (q + 1) * units.lanes; ++c) sol[c] = grid.scale_over_levels;
      }
      const Lanes::F vsol = Lanes::load(sol);
      for (int64_t t = u * U; t < (u + 1) * U; ++t) {
        plane_tiles::load_lane_streams(codes + t * kLanes * bt.lane_bytes, 8 * bt.lane_bytes, *words);
        plane_tiles::dequantize_rows_with<CB>(words->words, P, out + place.start(t), stride,
                                              [=](Lanes::I code) __attribute__((always_inline)) {
                                                // dequantize_sign_magnitude: (code - L) s / L
                                                return Lanes::mul(Lanes::to_float(Lanes::sub(code, vlev)), vsol);
                                              });
      }
    }
  });
}
#endif  // PACKRAT_PLANE_TILES

}  // namespace packrat::bucket_tiles

#pragma GCC diagnostic pop
