#pragma once
// The per-group codes of a GPU's NHWC tensor (taken in its plain order: quant/group/nhwc_tile.h) decoded
// straight into NHWC: a block of the CUDA kernel takes consecutive groups (one run of the plain
// order), copies their codes and metadata into shared memory in one round trip, and its threads
// walk the run's NHWC positions, a pixel's quad of 4 channels a thread, channels innermost, so
// that a warp writes whole lines; each value is decoded from its own group's codes
// (NhwcElementDecoder). Staging the decoded values through a plain-order tile and writing the tile
// back, as the quantize does, wrote 16 bytes a thread at a pixel's stride (a request to L2 each:
// the L2 60% busy at 0.3 of copy bandwidth, DRAM at 20%). CUDA-free: the kernel
// (quant/cuda/group_quant_cuda.cu) and the host tests (tests/quant/nhwc_decode_test.cpp) run the same phases.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cuda/kernels/float_io.h"
#include "core/fast_div.h"
#include "core/hd.h"
#include "quant/codec/apply_derivative_sink.h"
#include "quant/group/group_quant.h"
#include "quant/group/group_quant_warp.h"
#include "quant/group/nhwc_tile.h"

namespace packrat {

// A decode block's codes and metadata in shared memory: bytes [code_begin, code_end) of the codes,
// [meta_begin, meta_end) of the metadata, each begin rounded down to 16 so that the copy's 16-byte
// loads are aligned where the streams are. nhwc_decode_block_groups sizes a block to fit; a single
// group too large for them (fits false) is read in global memory.
constexpr int kNhwcCodeBytes = 8192 + 16;
constexpr int kNhwcMetaBytes = 8192 + 16;
// Values a block decodes at most, 64 a thread: 16 channels of a plane of 1024 (64-byte runs of a
// pixel). On an H100 (CodecCuda/GroupNhwc..., side by side in one run) 16384 decoded planes of 1024
// at 0.43 of copy, 8192 at 0.37, 32768 at 0.39; the ResNet-18 step did not tell them apart.
constexpr int64_t kNhwcDecodeValues = 16384;
struct NhwcBlockBytes {
  int64_t code_begin = 0, code_end = 0, meta_begin = 0, meta_end = 0;
  bool fits = false;
};
PACKRAT_HD inline NhwcBlockBytes nhwc_block_bytes(const GroupGeometry& g, const NhwcBlock& b) {
  NhwcBlockBytes r;
  if (b.count <= 0) return r;
  const GroupGeometry::Place last = g.place(b.first + b.count - 1);
  r.code_begin = g.place(b.first).code_offset / 16 * 16;
  r.code_end = last.code_offset + packed_bytes(last.len, g.bits);
  const int mb = meta_bytes_per_group(g.meta);
  r.meta_begin = b.first * mb / 16 * 16;
  r.meta_end = (b.first + b.count) * mb;
  r.fits = r.code_end - r.code_begin <= kNhwcCodeBytes && r.meta_end - r.meta_begin <= kNhwcMetaBytes;
  return r;
}
// Groups a decode block takes: as many as kNhwcDecodeValues, kNhwcCodeBytes and kNhwcMetaBytes
// allow (16 bytes of each kept for the rounded begins), at least one.
inline int64_t nhwc_decode_block_groups(const GroupGeometry& g) {
  const int64_t by_values = kNhwcDecodeValues / g.group_size;
  const int64_t by_codes = (kNhwcCodeBytes - 16) / g.full_group_bytes();
  const int64_t by_meta = (kNhwcMetaBytes - 16) / meta_bytes_per_group(g.meta);
  return std::max<int64_t>(1, std::min({by_values, by_codes, by_meta}));
}

// dst[0, n) = src[0, n), thread t's share: 16 bytes a load where src is 16-byte aligned (dst is).
PACKRAT_HD inline void copy_block_bytes(const uint8_t* src, int64_t n, uint8_t* dst, int t, int threads) {
  int64_t i = 0;
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    for (int64_t k = t; 16 * (k + 1) <= n; k += threads) {
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint4*>(dst + 16 * k) = *reinterpret_cast<const uint4*>(src + 16 * k);
#else
      std::memcpy(dst + 16 * k, src + 16 * k, 16);
#endif
    }
    i = n / 16 * 16;
  }
  for (int64_t k = i + t; k < n; k += threads) dst[k] = src[k];
}

// load_group_range of a record whose address is a multiple of 4 (the records lie back to back
// from a 16-byte aligned start, in a block's copy or in the stream): whole 32-bit loads on a GPU,
// where memcpy from a byte pointer compiled into a load a byte (PTX: the NHWC decode's 1152
// shared-memory reads were byte loads, four of an element's five or six its record's).
PACKRAT_HD inline GroupParams load_aligned_group_range(const uint8_t* src, MetaType meta) {
#if defined(__CUDA_ARCH__)
  const auto* words = reinterpret_cast<const uint32_t*>(src);
  if (meta == MetaType::BF16) {
    const uint32_t w = words[0];  // {min, step}, little-endian
    return {bf16_to_f32(static_cast<uint16_t>(w & 0xFFFFu)), bf16_to_f32(static_cast<uint16_t>(w >> 16)), 0.0f};
  }
  return {f32_from_bits(words[0]), f32_from_bits(words[1]), 0.0f};
#else
  return load_group_range(src, meta);
#endif
}

// The 4 codes of `bits` (<= 8) bits from bit `shift` (< 8) of c on: codes k at bits [k bits,
// (k + 1) bits) of the result. Only the bytes they lie in are read (at 2 bits from a byte
// boundary, one), one at a time: the quads of nhwc_decode_run_quads start anywhere in shared
// memory. (load_quad_codes, block_io.h, also clips to a stream's end and tries wide loads: work
// these quads, always whole, do not need.)
PACKRAT_HD inline uint32_t load_code_quad(const uint8_t* c, int shift, int bits) {
  const int end = shift + 4 * bits;  // <= 32: bits <= 7, or 8 from a byte boundary
  uint32_t word = c[0];
  if (end > 8) word |= static_cast<uint32_t>(c[1]) << 8;
  if (end > 16) word |= static_cast<uint32_t>(c[2]) << 16;
  if (end > 24) word |= static_cast<uint32_t>(c[3]) << 24;
  return word >> shift;
}

// The dequantized value of plain element x (< 2^31) from its group's code and metadata: the
// group and the place in it by two multiplicative divisions (span, then group within it), the
// code from one or two bytes. codes and meta hold the streams from their bytes code_shift and
// meta_shift on (a block's copy in shared memory; 0 and the whole streams otherwise).
struct NhwcElementDecoder {
  const uint8_t* codes;
  const uint8_t* meta;
  GroupGeometry g;
  FastDivU31 by_span, by_group;  // span_len, group_size
  int64_t code_shift = 0, meta_shift = 0;

  PACKRAT_HD float operator()(uint32_t x) const {
    const uint32_t span = by_span.div(x), off = x - span * static_cast<uint32_t>(g.span_len);
    const uint32_t i = by_group.div(off), at = off - i * static_cast<uint32_t>(g.group_size);
    const int64_t group = static_cast<int64_t>(span) * g.groups_per_span + i;
    const int64_t record = group * meta_bytes_per_group(g.meta) - meta_shift;
    const GroupParams p = load_aligned_group_range(meta + record, g.meta);
    const int64_t bit = static_cast<int64_t>(at) * g.bits;
    const uint8_t* c = codes + (span * g.span_bytes() + i * g.full_group_bytes() - code_shift) + (bit >> 3);
    const int shift = static_cast<int>(bit & 7);
    uint32_t word = c[0];
    if (shift + g.bits > 8) word |= static_cast<uint32_t>(c[1]) << 8;  // a code across two bytes (3 bits)
    return dequantize_value((word >> shift) & ((1u << g.bits) - 1u), p);
  }
  // The values of plain elements x .. x + 3, x a multiple of 4 in one group (nhwc_quad_decodable):
  // their group found once, their 4 x bits bits read from at most 4 bytes (one at 2 bits).
  PACKRAT_HD void quad(uint32_t x, float* v) const {
    const uint32_t span = by_span.div(x), off = x - span * static_cast<uint32_t>(g.span_len);
    const uint32_t i = by_group.div(off), at = off - i * static_cast<uint32_t>(g.group_size);
    const int64_t group = static_cast<int64_t>(span) * g.groups_per_span + i;
    const GroupParams p = load_aligned_group_range(meta + (group * meta_bytes_per_group(g.meta) - meta_shift), g.meta);
    const uint32_t bit = at * static_cast<uint32_t>(g.bits);
    const uint8_t* c = codes + (span * g.span_bytes() + i * g.full_group_bytes() - code_shift) + (bit >> 3);
    const uint32_t word = load_code_quad(c, static_cast<int>(bit & 7), g.bits);
    const uint32_t mask = (1u << g.bits) - 1u;
    for (int k = 0; k < 4; ++k) v[k] = dequantize_value((word >> (k * g.bits)) & mask, p);
  }
};
inline NhwcElementDecoder nhwc_element_decoder(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g) {
  return {codes, meta, g, FastDivU31(static_cast<uint32_t>(g.span_len)), FastDivU31(static_cast<uint32_t>(g.group_size))};
}

// A decode block's first phase, thread t's share: its codes and metadata copied into codes_copy
// (kNhwcCodeBytes) and meta_copy (kNhwcMetaBytes) where they fit; the decoder its threads use once
// every thread's share is done (the block's barrier).
PACKRAT_HD inline NhwcElementDecoder nhwc_copy_block_bytes(NhwcElementDecoder d, const NhwcBlockBytes& bytes,
                                                           uint8_t* codes_copy, uint8_t* meta_copy, int t,
                                                           int threads) {
  if (!bytes.fits) return d;
  copy_block_bytes(d.codes + bytes.code_begin, bytes.code_end - bytes.code_begin, codes_copy, t, threads);
  copy_block_bytes(d.meta + bytes.meta_begin, bytes.meta_end - bytes.meta_begin, meta_copy, t, threads);
  d.codes = codes_copy, d.meta = meta_copy;
  d.code_shift = bytes.code_begin, d.meta_shift = bytes.meta_begin;
  return d;
}

// Whether the decode can take 4 pixels x 4 channels a thread (nhwc_decode_run_quads): a pixel's
// channels in quads, a channel's pixels in quads, and 4 consecutive elements of a channel never
// split between groups (groups and spans start on multiples of 4) or across 32 bits of codes.
PACKRAT_HD inline bool nhwc_quad_decodable(const GroupGeometry& g, const CodecWalk& w) {
  return w.channels % 4 == 0 && w.plane % 4 == 0 && g.group_size % 4 == 0 && g.span_len % 4 == 0 && g.bits <= 8;
}

// nhwc_decode_run for nhwc_quad_decodable runs, 16 values a thread at a time: the 4 x 4 tile of a
// quad of channels (innermost, so that a warp's stores for one pixel are consecutive quads) and
// a quad of pixels. Each of the tile's channels is one decode.quad (a group found once for 4
// values, one code byte at 2 bits); each of its pixels is one float4 store (sink.finish). Element
// by element (nhwc_decode_run) an H100 issued about 85 instructions a value, bound by issue
// (Nsight Compute: issue slots 62% busy at 25% occupancy, DRAM 23%), and decoded at 0.44-0.46 of
// copy bandwidth; these tiles at 0.86-0.89 (CodecCuda/GroupNhwc...:1, side by side in one run).
// decode.quad(x, v): NhwcElementDecoder's, or the buckets' (quant/mixed/nhwc_buckets.h).
template <class Sink, class Decoder>
PACKRAT_HD inline void nhwc_decode_run_quads(const CodecWalk& w, ElementRun run, const Decoder& decode,
                                             const Sink& sink, int t, int threads) {
  const auto plane = static_cast<int32_t>(w.plane), channels = static_cast<int32_t>(w.channels);
  for_nhwc_run_samples(w, run, [&](int64_t base, int64_t a64, int64_t b64) {
    const auto a = static_cast<int32_t>(a64), b = static_cast<int32_t>(b64);  // multiples of 4
    const int32_t c_lo = a / plane, c_hi = (b - 1) / plane, v_lo = c_lo / 4;
    const auto nv = static_cast<uint32_t>(c_hi / 4 - v_lo + 1);
    const int32_t p_lo = c_lo == c_hi ? a % plane : 0;  // one channel: its pixels only
    const auto nq = static_cast<uint32_t>((c_lo == c_hi ? b - a : plane) / 4);
    BoxCursor at_k(static_cast<uint32_t>(t), nv, static_cast<uint32_t>(threads));  // inner: channel quad
    for (; at_k.k < nv * nq; at_k.advance()) {
      const int32_t c = 4 * (v_lo + static_cast<int32_t>(at_k.inner)), p = p_lo + 4 * static_cast<int32_t>(at_k.outer);
      const int64_t at = base + static_cast<int64_t>(p) * channels + c;  // the tile's first pixel, first channel
      float in[4][4] = {};  // (pixel, channel) the gradient, every load before any store
      PACKRAT_UNROLL
      for (int k = 0; k < 4; ++k) sink.load(at + k * channels, 4, in[k]);
      float v[4][4] = {};  // (channel, pixel)
      unsigned inside = 0;
      PACKRAT_UNROLL
      for (int r = 0; r < 4; ++r) {
        const int32_t e = (c + r) * plane + p;  // the sample's plain element of the channel's first pixel
        if (e < a || e >= b) continue;
        inside |= 1u << r;
        decode.quad(static_cast<uint32_t>(base + e), v[r]);
      }
      PACKRAT_UNROLL
      for (int k = 0; k < 4; ++k) {
        float px[4] = {v[0][k], v[1][k], v[2][k], v[3][k]};  // (channel) the tile's pixel k
        if (inside == 0xFu) {
          sink.finish(px, in[k], 4, at + k * channels);
          continue;
        }
        for (int r = 0; r < 4; ++r)  // a tile the run's edge cuts: its channels in the run, one by one
          if (inside >> r & 1u) {
            float one[4] = {px[r]}, g[4] = {in[k][r]};
            sink.finish(one, g, 1, at + k * channels + r);
          }
      }
    }
  });
}

// Thread t's share of decoding the run of a block into the NHWC buffers of `sink` (StoreValues, or
// an activation's backward over the NHWC gradient and gx), by NHWC offset: a thread's gradient
// loads (sink.load) are all issued before its first store (sink.finish; gx may be the gradient).
// decode(x): the value of plain element x (NhwcElementDecoder, or the buckets' decoder).
template <class Sink, class Decoder>
PACKRAT_HD inline void nhwc_decode_run(const CodecWalk& w, ElementRun run, const Decoder& decode, const Sink& sink,
                                       int t, int threads) {
  const auto plane = static_cast<uint32_t>(w.plane);
  if (w.channels % 4 == 0) {
    for_nhwc_vectors<4, true>(w, run, t, threads, [&](int64_t base, const int32_t* e, const int32_t* at, const unsigned* inside) {
      constexpr int kBatch = kNhwcVectorBatch<4>;
      float in[kBatch][4] = {};  // (batch, channel of the quad) the gradient, every load before any store
      PACKRAT_UNROLL
      for (int j = 0; j < kBatch; ++j)
        if (inside[j] == 0xFu) sink.load(base + at[j], 4, in[j]);
      PACKRAT_UNROLL
      for (int j = 0; j < kBatch; ++j) {
        const auto x = static_cast<uint32_t>(base + e[j]);  // the quad's first channel, plain
        if (inside[j] == 0xFu) {
          float v[4];
          PACKRAT_UNROLL
          for (int r = 0; r < 4; ++r) v[r] = decode(x + r * plane);
          sink.finish(v, in[j], 4, base + at[j]);
          continue;
        }
        for (int r = 0; r < 4; ++r)  // a quad the run's edge cuts: its channels in the run, one by one
          if (inside[j] >> r & 1u) {
            float v[4] = {decode(x + r * plane)}, g[4] = {};
            sink.load(base + at[j] + r, 1, g);
            sink.finish(v, g, 1, base + at[j] + r);
          }
      }
    });
    return;
  }
  for_nhwc_run(w, run, t, threads, [&](const int64_t* i, const int64_t* at, const bool* inside) {
    float in[kNhwcBatch][4] = {};  // (batch) the gradient, every load before any store
    PACKRAT_UNROLL
    for (int j = 0; j < kNhwcBatch; ++j)
      if (inside[j]) sink.load(at[j], 1, in[j]);
    PACKRAT_UNROLL
    for (int j = 0; j < kNhwcBatch; ++j)
      if (inside[j]) {
        float v[4] = {decode(static_cast<uint32_t>(run.begin + i[j]))};
        sink.finish(v, in[j], 1, at[j]);
      }
  });
}

}  // namespace packrat
