#pragma once
// How a CUDA warp runs the per-group codec (quant/cuda/group_quant_cuda.cu), CUDA-free: the kernels
// call these per-lane steps between their shuffles and warp barriers, and
// tests/quant/group_quant_warp_test.cpp replays the same steps lane by lane on the host (the
// shuffles and the shared-memory phases included) against the CPU kernel's bytes.
//
// Quantize. A warp takes 32 / S consecutive groups, S = quantize_lanes(G) lanes each, and lane s
// of a group takes its blocks of 8 values s, s + S, s + 2S, ... (a warp's load of one block a lane
// reads consecutive 32-byte blocks). S is the fewest lanes whose kLaneBlocks blocks each cover G
// (groups of 256 take 8 lanes of 4 blocks): each lane quantizes 32 values, over which its fixed
// work (its place, the range's shuffles, the group's parameters, the noise's index arithmetic) is
// spread; with a block a lane, that work was as large as the 8 values' own, and kept the kernel
// bound by instruction issue at a third of copy bandwidth. The lanes reduce the group's range by
// shuffles (RangeScan: any order gives the CPU's scan), then quantize their blocks. Rounds of S
// blocks go kLaneBlocks to a chunk: groups tile the buffer in order, so a chunk's elements over
// all the warp's groups are one run of at most 1024 (chunk_elements; a warp of several groups has
// one chunk, a group over 1024 values several), whose rounding noise is at most 513 of the
// stream's words (rounding_noise16: two elements a word): the lanes draw them once (make_chunk_noise,
// up to 17 a lane) into shared memory, and every element reads its half-word back (chunk_noise16),
// one hash per two elements.
//
// Dequantize. S = dequantize_lanes(G) lanes a group, lane s writing the group's quads of 4 values
// s, s + S, ... (DequantizeQuadsBody): consecutive lanes write consecutive 16 bytes, one float4
// each where the group starts on a 4-float boundary, so a warp's stores are coalesced (one thread
// per block of 8 wrote 8 floats at a 32-byte stride between lanes).
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/noise_hash.h"
#include "quant/bits/block_io.h"
#include "quant/group/group_quant.h"

namespace packrat {

constexpr int kWarpLanes = 32, kWarpLanesLog2 = 5;

// ---- a group's range, by lanes, in any order -----------------------------------------------

// A lane's running range of a group, by value alone: it starts from the group's first value on
// every lane, keeps its own values, then merges the other lanes' scans, with fminf / fmaxf (one
// instruction each on a GPU; carrying each extreme's 64-bit index for the tie-break, as before,
// kept the kernel bound by arithmetic). That is the CPU's plain scan (x < mn from the first
// value) in any order, but for two cases settled after the merge: a NaN first value, which the
// CPU keeps (nothing compares below it) while fminf skips it (finish); and a range that ends in a
// zero, whose sign the CPU takes from the group's first zero (the first element of the
// extreme's class) while fminf may return either zero (ends_in_zero, then settle_zero with the
// first zero the group's lanes find).
struct RangeScan {
  float first, mn, mx;
  PACKRAT_HD explicit RangeScan(float first_value) : first(first_value), mn(first_value), mx(first_value) {}
  // v[0..n), n <= 8, of the group's elements.
  PACKRAT_HD void keep(const float* v, int n) {
    for (int k = 0; k < 8; ++k) {  // a constant trip count: v stays in registers
      if (k >= n) break;
      mn = fminf(mn, v[k]);
      mx = fmaxf(mx, v[k]);
    }
  }
  PACKRAT_HD void merge(const RangeScan& o) {
    mn = fminf(mn, o.mn);
    mx = fmaxf(mx, o.mx);
  }
  // Merged: whether the sign of a zero extreme must come from the group's first zero.
  PACKRAT_HD bool ends_in_zero() const { return first == first && (mn == 0.0f || mx == 0.0f); }
  // first_zero: the group's first zero (first_zero_in's encoding, the least over its lanes).
  PACKRAT_HD void settle_zero(uint64_t first_zero) {
    const float zero = (first_zero & 1) ? -0.0f : 0.0f;
    if (mn == 0.0f) mn = zero;
    if (mx == 0.0f) mx = zero;
  }
  // Merged (and settled): the CPU's (min, max).
  PACKRAT_HD void finish() {
    if (first != first) mn = mx = first;
  }
};

// The first zero among v[0..n), n <= 8, the group's elements first, first + 1, ...: 2 * index +
// its sign bit, so that the least over lanes is the group's first zero; kNoZero when none is.
constexpr uint64_t kNoZero = ~uint64_t{0};
PACKRAT_HD inline uint64_t first_zero_in(const float* v, int n, int64_t first) {
  for (int k = 0; k < 8; ++k)
    if (k < n && v[k] == 0.0f) return (static_cast<uint64_t>(first + k) << 1) | (f32_bits(v[k]) >> 31);
  return kNoZero;
}

// ---- quantize: which lane does what ----------------------------------------------------------

// Blocks of 8 a lane quantizes in a chunk (one per round).
constexpr int kLaneBlocks = 4;
// Lanes a group takes: the smallest power of two whose kLaneBlocks blocks of 8 each cover G, at
// most a warp.
PACKRAT_HD inline int quantize_lanes(int64_t group_size) {
  int s = 1;
  while (s < kWarpLanes && 8 * kLaneBlocks * static_cast<int64_t>(s) < group_size) s *= 2;
  return s;
}
// log2 of a power of two <= 32: the lane arithmetic shifts, for a GPU divides in software.
PACKRAT_HD inline int lanes_log2(int lanes) {
#if defined(__CUDA_ARCH__)
  return __ffs(lanes) - 1;  // one instruction, where a loop took a few a step
#else
  return std::countr_zero(static_cast<unsigned>(lanes));
#endif
}
// Warps for all of g's groups (32 / S groups a warp).
PACKRAT_HD inline int64_t quantize_warps(const GroupGeometry& g, int lanes) {
  const int per_warp_log2 = kWarpLanesLog2 - lanes_log2(lanes);
  return (g.groups() + (int64_t{1} << per_warp_log2) - 1) >> per_warp_log2;
}
// Rounds of S blocks: the same on every lane (each chunk of them ends at a warp barrier).
PACKRAT_HD inline int64_t quantize_rounds(const GroupGeometry& g, int lanes) {
  return (g.blocks_per_group() + lanes - 1) >> lanes_log2(lanes);
}
// Chunks of kLaneBlocks rounds: one where a warp takes several groups (S kLaneBlocks blocks cover G).
PACKRAT_HD inline int64_t quantize_chunks(const GroupGeometry& g, int lanes) {
  return (quantize_rounds(g, lanes) + kLaneBlocks - 1) / kLaneBlocks;
}

// What lane `lane` of warp `warp` works on.
struct QuantLane {
  int64_t group;            // its group; past the last one for an idle lane (its whole sub-warp idles)
  int sub;                  // its index among its group's lanes
  bool active;              // its group exists
  GroupGeometry::Place at;  // its group's place (an idle lane: the warp's first group's)
  int last_lead;            // the first lane of the warp's last group, which knows where the warp's elements end
};
PACKRAT_HD inline QuantLane quant_lane(const GroupGeometry& g, int lanes, int64_t warp, int lane) {
  const int shift = lanes_log2(lanes), per_warp = kWarpLanes >> shift;
  const int64_t first = warp * per_warp;
  const int64_t last = (first + per_warp < g.groups() ? first + per_warp : g.groups()) - 1;
  QuantLane q;
  q.group = first + (lane >> shift);
  q.sub = lane & (lanes - 1);
  q.active = q.group <= last;
  q.at = g.place(q.active ? q.group : first);
  q.last_lead = static_cast<int>(last - first) * lanes;
  return q;
}
// The lane's block in round r (s + S r) and the number of its elements (0: none).
PACKRAT_HD inline int64_t lane_block(const QuantLane& q, int lanes, int64_t r) { return q.sub + lanes * r; }
PACKRAT_HD inline int lane_block_len(const QuantLane& q, int lanes, int64_t r) {
  return q.active ? block8_len(q.at.len, lane_block(q, lanes, r)) : 0;
}

// ---- quantize: one chunk's rounding noise, shared by the warp --------------------------------

// The elements [begin, end) that chunk c quantizes, over all the warp's groups: its first group
// starts at warp_begin, its last ends at warp_end. Empty when the chunk has no block left. (With
// several groups a warp, chunk 0 is all of them; with one, chunk c is its 8 * 32 kLaneBlocks
// elements from the c-th.)
struct ElementRun {
  int64_t begin, end;
};
PACKRAT_HD inline ElementRun chunk_elements(int64_t warp_begin, int64_t warp_end, int lanes, int64_t c) {
  const int64_t b = warp_begin + 8 * kLaneBlocks * static_cast<int64_t>(lanes) * c;
  const int64_t e = b + 8 * kLaneBlocks * kWarpLanes;
  return {b, warp_end < e ? warp_end : e};
}

// Shared place of a run's noise word c: a word of padding after every 32, so that lanes reading
// the words of consecutive blocks of 8 (lane L: words 4 L + k) hit distinct banks (4-way
// conflicts without it).
PACKRAT_HD constexpr int shared_noise_index(int c) { return c + (c >> 5); }
// Shared words for the noise of a run of `values` elements: its words (values / 2 + 1, from any
// start) and the 3 a last block of 8 may read past them (chunk_noise16_block8), padded.
PACKRAT_HD constexpr int noise_shared_words(int values) { return shared_noise_index(values / 2 + 4) + 1; }
constexpr int kChunkNoiseWords = noise_shared_words(8 * kLaneBlocks * kWarpLanes);  // a warp's shared words

// The noise words of a run: words [first_word, first_word + words) of the stream, element e's
// noise half e % 2 of word e / 2 (rounding_noise16's).
struct NoiseChunk {
  uint64_t first_word = 0;
  int words = 0;
};
PACKRAT_HD inline NoiseChunk noise_chunk(const ElementRun& run) {
  NoiseChunk r;
  if (run.end <= run.begin) return r;
  r.first_word = static_cast<uint64_t>(run.begin) >> 1;
  r.words = static_cast<int>((static_cast<uint64_t>(run.end - 1) >> 1) - r.first_word + 1);
  return r;
}
// Lane `lane`'s words (lane, lane + threads, ... < r.words) into the shared words of the warp
// (kChunkNoiseWords; threads 32) or of a block's threads (shared_noise_index's places).
PACKRAT_HD inline void make_chunk_noise(const QuantNoise& noise, const NoiseChunk& r, int lane, uint32_t* shared,
                                        int threads = kWarpLanes) {
  const NoiseKey key = noise_key(noise.seed, noise.stream);
  for (int c = lane; c < r.words; c += threads)
    shared[shared_noise_index(c)] = noise_word(key, r.first_word + static_cast<uint64_t>(c));
}
// rounding_noise16(seed, stream, e) of an element e of the chunk, from the shared words.
PACKRAT_HD inline uint32_t chunk_noise16(const NoiseChunk& r, const uint32_t* shared, uint64_t e) {
  const int c = static_cast<int>((e >> 1) - r.first_word);
  return (shared[shared_noise_index(c)] >> (16 * (e & 1))) & 0xFFFFu;
}
// The same for the n <= 8 elements e0 .. e0 + n - 1 (half[0..n); the rest are not meaningful).
// A block on an even element takes its 4 words' halves in order (a word past the run's is
// within the shared words, noise_shared_words); elsewhere element by element, the n only.
PACKRAT_HD inline void chunk_noise16_block8(const NoiseChunk& r, const uint32_t* shared, uint64_t e0, int n,
                                            uint32_t* half) {
  if ((e0 & 1) != 0) {
    for (int k = 0; k < 8; ++k) half[k] = k < n ? chunk_noise16(r, shared, e0 + static_cast<uint64_t>(k)) : 0u;
    return;
  }
  const int c0 = static_cast<int>((e0 >> 1) - r.first_word);
  for (int k = 0; k < 4; ++k) {
    const uint32_t w = shared[shared_noise_index(c0 + k)];
    half[2 * k] = w & 0xFFFFu;
    half[2 * k + 1] = w >> 16;
  }
}

// A lane's work on a block once the chunk's noise is shared: the codes of its block (n values v, the
// first one element e0 of the stream) rounded with the shared noise (null: to nearest), stored
// at dst (the block's bytes).
PACKRAT_HD inline void quantize_lane_block(const float* v, int n, uint64_t e0, const GroupParams& p, int bits,
                                           const NoiseChunk& r, const uint32_t* shared, uint8_t* dst) {
  float u[8];
  if (shared) {
    uint32_t half[8];
    chunk_noise16_block8(r, shared, e0, n, half);
    for (int k = 0; k < 8; ++k) u[k] = uniform16(half[k]);  // past n: unused
  } else {
    for (int k = 0; k < 8; ++k) u[k] = 0.5f;
  }
  store_bytes_wide(quantize_block8_word(v, n, p, bits, u), static_cast<int>(packed_bytes(n, bits)), dst);
}

// ---- dequantize: quads of 4 values, consecutive lanes on consecutive quads ------------------

// Lanes a group takes: the smallest power of two whose quads cover G, at most a warp.
PACKRAT_HD inline int dequantize_lanes(int64_t group_size) {
  int s = 1;
  while (s < kWarpLanes && 4 * static_cast<int64_t>(s) < group_size) s *= 2;
  return s;
}

// Where DequantizeQuadsBody puts a quad: the values, at out[at, at + n). load and finish: the two
// halves of a sink's call (apply_derivative_sink.h), for a caller that issues a batch's loads first.
struct StoreValues {
  float* out;  // (g.numel)
  PACKRAT_HD void load(int64_t, int, float*) const {}
  PACKRAT_HD void finish(const float* v, const float*, int n, int64_t at) const { store_floats4(v, n, out + at); }
  PACKRAT_HD void operator()(float* v, int n, int64_t at) const { finish(v, nullptr, n, at); }
};

// Lane `sub` of the `lanes` on group `group`: its quads sub, sub + lanes, ..., dequantized and
// handed to the sink (StoreValues, or an activation's backward: quant/codec/apply_derivative_sink.h).
template <class Sink = StoreValues>
struct DequantizeQuadsBody {
  const uint8_t* codes;  // (g.code_bytes())
  const uint8_t* meta;   // (g.meta_bytes())
  GroupGeometry g;
  Sink sink;

  PACKRAT_HD void operator()(int64_t group, int sub, int lanes) const {
    const GroupGeometry::Place at = g.place(group);
    const GroupParams p = load_group_meta(meta + group * meta_bytes_per_group(g.meta), g.meta);
    const uint32_t mask = (1u << g.bits) - 1u;
    for (int64_t q = sub; 4 * q < at.len; q += lanes) {
      const int n = at.len - 4 * q < 4 ? static_cast<int>(at.len - 4 * q) : 4;
      const uint32_t c = load_quad_codes(codes + at.code_offset, at.len, q, g.bits);
      float v[4] = {};
      for (int k = 0; k < 4; ++k) v[k] = dequantize_value((c >> (k * g.bits)) & mask, p);  // past n: unused
      sink(v, n, at.start + 4 * q);
    }
  }
};

}  // namespace packrat
