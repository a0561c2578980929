// The CPU kernels of per-group quantization: AVX-512 or AVX2 where the build has it, OpenMP over
// groups. They write the same bytes as the per-group reference in quant/group/group_quant.h
// (quantize_group / dequantize_group), which tests/quant/codec_bitexact_test.cpp checks for every
// width, rounding mode and metadata type.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/cpu/bf16_simd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/group/group_quant.h"
#include "quant/cpu/group_quant_simd.h"
#include "quant/cpu/plain_runs.h"
#include "quant/cpu/plane_tiles.h"
#include "quant/cpu/whole_plane_tiles.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace packrat {

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers, as in mixed_quant.cpp; the unpack and shuffle ones say "uninitialized").
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using namespace group_simd;

constexpr int64_t kChunk = 256;  // elements quantized per inner pass (a multiple of 128)
#if defined(PACKRAT_PLANE_TILES)
constexpr int kParamLanes = plane_tiles::kLanes;  // groups whose params one lane_group_params makes
#else
constexpr int kParamLanes = 1;
#endif


// The rounding noise of one thread's walk through its groups, which ask for rising, often
// overlapping element ranges: a group shorter than the noise's 128-element blocks (per-plane
// groups of 49) shares its blocks with its neighbours, so blocks already made are kept, not made
// again.
class NoiseWindow {
 public:
  explicit NoiseWindow(const QuantNoise& noise) : key_(noise_key(noise.seed, noise.stream)) {}
  // The noise of elements [e0, e0 + n), n <= kChunk.
  const uint16_t* get(int64_t e0, int64_t n) {
    const int64_t b0 = e0 >> 7, b1 = (e0 + n - 1) >> 7;
    if (b0 < first_ || b0 >= first_ + count_) {
      count_ = 0;  // nothing reusable
    } else if (b0 > first_) {
      count_ -= b0 - first_;  // keep the blocks from b0 on
      std::memmove(buf_, buf_ + (b0 - first_) * 128, static_cast<size_t>(count_) * 128 * sizeof(uint16_t));
    }
    first_ = b0;
    if (b1 >= first_ + count_) {
      fill_noise_blocks(key_, first_ + count_, b1, buf_ + count_ * 128);
      count_ = b1 - first_ + 1;
    }
    return buf_ + (e0 - 128 * b0);
  }

 private:
  NoiseKey key_;
  int64_t first_ = 0, count_ = 0;       // the blocks held: [first_, first_ + count_)
  alignas(64) uint16_t buf_[kChunk + 2 * 128];  // (blocks covering a chunk, 128)
};

#if defined(__AVX512BW__)
// packed_bytes(m, B) bytes at src -> the first m = min(n, 64) codes of B in {2, 4} bits, one a byte.
// Masked loads and stores: nothing past either end is touched.
template <int B>
inline void unpack64(const uint8_t* src, int64_t n, uint8_t* codes) {
  n = n < 64 ? n : 64;
  const __mmask64 out = n == 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
  const uint64_t in = (uint64_t{1} << packed_bytes(n, B)) - 1;
  if constexpr (B == 2) {  // byte b -> 32-bit lane (b&3) | (b>>2&3)<<8 | (b>>4&3)<<16 | (b>>6)<<24
    const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(static_cast<__mmask16>(in), src));
    const __m512i w = _mm512_or_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 6)),
                                      _mm512_or_si512(_mm512_slli_epi32(b, 12), _mm512_slli_epi32(b, 18)));
    _mm512_mask_storeu_epi8(codes, out, _mm512_and_si512(w, _mm512_set1_epi32(0x03030303)));
  } else {  // byte b -> 16-bit lane (b&15) | (b>>4)<<8
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(static_cast<__mmask32>(in), src));
    const __m512i w = _mm512_or_si512(b, _mm512_slli_epi16(b, 4));
    _mm512_mask_storeu_epi8(codes, out, _mm512_and_si512(w, _mm512_set1_epi16(0x0F0F)));
  }
}
#endif

template <int B>
inline void unpack_chunk(const uint8_t* src, int64_t n, uint8_t* codes) {
  if constexpr (B == 8) {
    std::memcpy(codes, src, static_cast<size_t>(n));
  } else if constexpr (B == 2 || B == 4) {
    int64_t i = 0;
#if defined(__AVX512BW__)
    for (; i < n; i += 64) unpack64<B>(src + i * B / 8, n - i, codes + i);
    return;
#endif
    constexpr int per = 8 / B;
#if defined(__AVX2__)
    // 32 codes at a time from 8 or 16 bytes, unpack64's arithmetic on 8 dwords or 16 words.
    for (; i + 32 <= n; i += 32) {
      __m256i w;
      if constexpr (B == 2) {
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i / 4)));
        w = _mm256_or_si256(_mm256_or_si256(b, _mm256_slli_epi32(b, 6)),
                            _mm256_or_si256(_mm256_slli_epi32(b, 12), _mm256_slli_epi32(b, 18)));
        w = _mm256_and_si256(w, _mm256_set1_epi32(0x03030303));
      } else {
        const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i / 2)));
        w = _mm256_and_si256(_mm256_or_si256(b, _mm256_slli_epi16(b, 4)), _mm256_set1_epi16(0x0F0F));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), w);
    }
#endif
    // Four codes a 32-bit word (unpack64's arithmetic): byte b -> (b&3)|(b>>2&3)<<8|(b>>4&3)<<16|
    // (b>>6)<<24, or bytes b0, b1 -> (b0&15)|(b0>>4)<<8|(b1&15)<<16|(b1>>4)<<24.
    for (; i + 4 <= n; i += 4) {
      uint32_t w;
      if constexpr (B == 2) {
        const uint32_t b = src[i / 4];
        w = (b | b << 6 | b << 12 | b << 18) & 0x03030303u;
      } else {
        const uint32_t b = src[i / 2] | static_cast<uint32_t>(src[i / 2 + 1]) << 16;
        w = (b | b << 4) & 0x0F0F0F0Fu;
      }
      std::memcpy(codes + i, &w, 4);
    }
    if (i < n) unpack_group_codes(src + i / per, n - i, B, codes + i);
  } else {
    unpack_group_codes(src, n, B, codes);
  }
}

// out[i] = dequantize_value(codes[i], p), n elements.
inline void dequantize_run(const uint8_t* codes, int64_t n, const GroupParams& p, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vmin = _mm512_set1_ps(p.min), vstep = _mm512_set1_ps(p.step);
  for (; i + 16 <= n; i += 16) {
    const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i))));
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(c, vstep, vmin));  // as dequantize_value
  }
#endif
  for (; i < n; ++i) out[i] = dequantize_value(codes[i], p);
}

// Calls fn(g0, g1) over ranges of about `grain` groups, each range from the group cut(r * grain)
// (cut: monotone, cut(gi) in [gi, gi + grain)), each thread first on its own block of them
// (parallel_ranges_local_first: the quantize reads what the producing kernel's static split left
// in that thread's core's cache).
template <typename Cut, typename Fn>
void for_group_ranges(int64_t groups, int64_t grain, Cut&& cut, Fn&& fn) {
  const int64_t ranges = (groups + grain - 1) / grain;
  if (ranges <= 1 || omp_get_max_threads() == 1) {
    fn(int64_t{0}, groups);  // one call: one noise window, one tile copy
    return;
  }
  parallel_ranges_local_first(ranges, [&](int64_t r) {
    const int64_t g0 = r == 0 ? 0 : cut(r * grain), g1 = r + 1 == ranges ? groups : cut((r + 1) * grain);
    if (g0 < g1) fn(g0, g1);
  });
}

template <int B, typename T>
void quantize_impl(const T* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise, uint8_t* codes,
                   uint8_t* meta, double* group_range_sq, const CodecWalk& walk) {
#if defined(PACKRAT_PLANE_TILES)
  if (const GroupGeometry tg = plane_tiles::tile_geometry(g, walk); tg.spans > 0)
    return plane_tiles::quantize<B>(x, tg, walk, rounding, noise, codes, meta, group_range_sq);
  if (plane_tiles::applies_whole_planes(g, walk))
    return plane_tiles::quantize_whole_planes<B>(x, g, walk, rounding, noise, codes, meta, group_range_sq);
#endif
  [[maybe_unused]] constexpr uint32_t levels = (1u << B) - 1u;
  const bool stochastic = rounding == Rounding::Stochastic;
  const int meta_size = meta_bytes_per_group(g.meta);
  const int64_t grain = std::max<int64_t>(1, kMinParallelWork / g.group_size);
  const auto cut = [&](int64_t gi) { return group_at_tile_edge(g, walk, gi, grain); };
  for_group_ranges(g.groups(), grain, cut, [&](int64_t g0, int64_t g1) {
    [[maybe_unused]] alignas(64) uint8_t code_buf[kChunk];  // (kChunk,)
    NoiseWindow window(noise);
    std::optional<PlainRuns> plain;  // a blocked buffer's groups in plain order
    if (walk.channels) plain.emplace(walk, g.group_size);
    StagedRuns<T> staged(g1 < g.groups() ? g.group_start(g1) : g.numel);  // a plain bf16 buffer's groups as f32
    // Groups in batches of up to kBatch: first the range and metadata of each (a chain of
    // dependent steps, two divisions among them, that the next group's does not wait for), then
    // their codes. One group after another, each group's codes waited for its chain (perf: a third
    // of the 2-bit quantize at the division's result, per-plane groups of 32). A batch's groups lie
    // in one tile of a blocked buffer, so that the pointers read stay valid (PlainRuns).
    constexpr int kBatch = 16;
    GroupGeometry::Cursor next = g.cursor(g0);  // group gi's place
    for (int64_t gi = g0; gi < g1;) {
      // The batch's places, field by field: Place records copied into an array were written in
      // two stores and read back in one spanning both, which store forwarding cannot serve (a
      // seventh of the 2-bit quantize of EfficientNet's blocked tensors in perf, Zen 4).
      int64_t starts[kBatch], lens[kBatch], offsets[kBatch];
      const float* xs[kBatch];
      alignas(64) float mn[kBatch] = {}, mx[kBatch] = {};  // their ranges (kBatch: a multiple of kParamLanes)
      GroupParams ps[kBatch];
      int count = 0;
      int64_t tile = -1;
      for (; gi < g1 && count < kBatch; ++gi, ++count, next.next()) {
        const GroupGeometry::Place q = *next;
        if (plain) {
          const int64_t t = plain->in_one_tile(q.start, q.len) ? plain->tile_of(q.start) : -1;
          if (count > 0 && (t < 0 || t != tile)) break;  // a group across tiles is a batch alone
          tile = t;
        } else if (count > 0 && !staged.holds(q.start, q.len)) {
          break;  // the batch's groups are read from one window
        }
        starts[count] = q.start;
        lens[count] = q.len;
        offsets[count] = q.code_offset;
        xs[count] = plain ? plain->read(x, q.start, q.len) : staged.read(x, q.start, q.len);
        group_range(xs[count], q.len, mn[count], mx[count]);
      }
      // The batch's metadata: its groups' params a register of lanes at a time (unused lanes of
      // the last are computed and not read).
      for (int j = 0; j < count; j += kParamLanes) {
#if defined(PACKRAT_PLANE_TILES)
        alignas(64) float pmin[kParamLanes], pstep[kParamLanes], pinv[kParamLanes];
        plane_tiles::lane_group_params<B>(mn + j, mx + j, g.meta, pmin, pstep, pinv);
        for (int c = 0; c < kParamLanes && j + c < count; ++c) ps[j + c] = GroupParams{pmin[c], pstep[c], pinv[c]};
#else
        ps[j] = group_params(mn[j], mx[j], B, g.meta);
#endif
      }
      for (int j = 0; j < count; ++j) {
        const int64_t gj = gi - count + j;
        store_group_meta(ps[j], g.meta, meta + gj * meta_size);
        if (group_range_sq) group_range_sq[gj] = packrat::group_range_sq(ps[j], lens[j], B);
      }
      for (int j = 0; j < count; ++j) {
        const int64_t start = starts[j], len = lens[j];
        const GroupParams& p = ps[j];
        uint8_t* dst = codes + offsets[j];
        for (int64_t c = 0; c < len; c += kChunk) {
          const int64_t n = std::min(kChunk, len - c);
          const float* xc = xs[j] + c;
          const uint16_t* r = stochastic ? window.get(start + c, n) : nullptr;
#if defined(__AVX512BW__) && defined(__BMI2__)
          quantize_pack<B>(xc, n, p, r, dst + c * B / 8);  // c is a multiple of 8: byte aligned
#else
          quantize_run(xc, n, p, levels, r, code_buf);
          pack_chunk<B>(code_buf, n, dst + c * B / 8);  // c is a multiple of 8: byte aligned
#endif
        }
      }
    }
  });
}

template <int B, typename T>
void dequantize_impl(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, T* out,
                     const CodecWalk& walk) {
#if defined(PACKRAT_PLANE_TILES)
  if (const GroupGeometry tg = plane_tiles::tile_geometry(g, walk); tg.spans > 0)
    return plane_tiles::dequantize<B>(codes, meta, tg, walk, out);
  if (plane_tiles::applies_whole_planes(g, walk)) return plane_tiles::dequantize_whole_planes<B>(codes, meta, g, walk, out);
#endif
  const int meta_size = meta_bytes_per_group(g.meta);
  const int64_t grain = std::max<int64_t>(1, kMinParallelWork / g.group_size);
  const auto cut = [&](int64_t gi) { return group_at_tile_edge(g, walk, gi, grain); };
  for_group_ranges(g.groups(), grain, cut, [&](int64_t g0, int64_t g1) {
    [[maybe_unused]] alignas(64) uint8_t code_buf[kChunk];  // (kChunk,)
    [[maybe_unused]] alignas(64) float value_buf[kChunk];   // (kChunk,) a chunk's values on their way to bf16
    std::optional<PlainRuns> plain;  // a blocked buffer's groups in plain order
    if (walk.channels) plain.emplace(walk, g.group_size);
    GroupGeometry::Cursor at = g.cursor(g0);  // group gi's place
    for (int64_t gi = g0; gi < g1; ++gi, at.next()) {
      const GroupGeometry::Place q = *at;
      const int64_t start = q.start, len = q.len;
      const GroupParams p = load_group_meta(meta + gi * meta_size, g.meta);
      const uint8_t* src = codes + q.code_offset;
      // f32 values: straight into out, or the tile's copy; a plain bf16 out: a chunk at a time
      // through value_buf.
      constexpr bool direct = std::is_same_v<T, float>;
      float* og = plain ? plain->write(out, start, len) : nullptr;
      if constexpr (direct)
        if (!plain) og = out + start;
      for (int64_t c = 0; c < len; c += kChunk) {
        const int64_t n = std::min(kChunk, len - c);
        float* oc = og ? og + c : value_buf;
#if defined(__AVX512BW__) && defined(__BMI2__)
        unpack_dequantize<B>(src + c * B / 8, n, p, oc);
#else
        unpack_chunk<B>(src + c * B / 8, n, code_buf);
        dequantize_run(code_buf, n, p, oc);
#endif
        if constexpr (!direct)
          if (!og) simd::f32_to_bf16_run(value_buf, n, out + start + c);
      }
    }
    if (plain) plain->finish(out);
  });
}

template <typename Fn>
void dispatch_bits(int bits, Fn&& fn) {
  if (!group_simd::dispatch_group_width(bits, fn))
    fail("per-group quantization: {} bits is not supported (1, 2, 3, 4 or 8)", bits);
}

template <typename T>
void quantize_groups_of(const T* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                        uint8_t* codes, uint8_t* meta, std::vector<double>* group_range_sq, CodecWalk walk) {
  if (group_range_sq) group_range_sq->assign(static_cast<size_t>(g.groups()), 0.0);
  if (g.groups() == 0) return;
  dispatch_bits(g.bits, [&](auto b) {
    quantize_impl<decltype(b)::value>(x, g, rounding, noise, codes, meta,
                                      group_range_sq ? group_range_sq->data() : nullptr, walk);
  });
}

template <typename T>
void dequantize_groups_to(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, T* out,
                          CodecWalk walk) {
  if (g.groups() == 0) return;
  dispatch_bits(g.bits, [&](auto b) { dequantize_impl<decltype(b)::value>(codes, meta, g, out, walk); });
}

}  // namespace

void quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, std::vector<double>* group_range_sq, CodecWalk walk) {
  quantize_groups_of(x, g, rounding, noise, codes, meta, group_range_sq, walk);
}

void quantize_groups(const bf16_t* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, std::vector<double>* group_range_sq, CodecWalk walk) {
  PACKRAT_CHECK(g.group_size <= kMaxStagedGroup,
                "quantize_groups: groups of {} bf16 values (the CPU kernels read bf16 in groups of up to {})",
                g.group_size, kMaxStagedGroup);
  quantize_groups_of(x, g, rounding, noise, codes, meta, group_range_sq, walk);
}

void dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out,
                       CodecWalk walk) {
  dequantize_groups_to(codes, meta, g, out, walk);
}

void dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, bf16_t* out,
                       CodecWalk walk) {
  dequantize_groups_to(codes, meta, g, out, walk);
}

}  // namespace packrat

#pragma GCC diagnostic pop
