#include "quant/cpu/plain_runs.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/cpu/bf16_simd.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace packrat {

// GCC 12 warns about the undefined pass-through operand inside the AVX-512 unpack and shuffle
// intrinsics (a false positive of its headers, as in group_quant_cpu.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// The buffer offset of plain element e of a blocked tensor (see CodecWalk).
inline int64_t blocked_offset(const CodecWalk& b, int64_t e) {
  const int64_t nc = e / b.plane, s = e % b.plane, n = nc / b.channels, c = nc % b.channels;
  return ((n * (b.channels / b.block) + c / b.block) * b.plane + s) * b.block + c % b.block;
}

// Calls fn(run_start, run_len, offset) for the runs of [e0, e0 + len) that stay within one
// channel plane; a run's elements lie b.block floats apart from `offset` on.
template <typename Fn>
void for_plane_runs(const CodecWalk& b, int64_t e0, int64_t len, Fn&& fn) {
  for (int64_t e = e0; e < e0 + len;) {
    const int64_t run = std::min(b.plane - e % b.plane, e0 + len - e);
    fn(e - e0, run, blocked_offset(b, e));
    e += run;
  }
}

// The buffer's elements, f32 or bf16, as f32 and back (rounded as Tensor::to rounds): one at a
// time, and a row of 16 (AVX-512) or 8 (AVX2) at a time.
inline float widen(float x) { return x; }
inline float widen(bf16_t x) { return to_f32(x); }
inline void narrow(float x, float& out) { out = x; }
inline void narrow(float x, bf16_t& out) { out = from_f32<bf16_t>(x); }
#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16_t* p) { return simd::load_bf16x16(p); }
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store16(bf16_t* p, __m512 v) { simd::store_bf16x16(p, v); }
#endif
#if defined(__AVX2__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16_t* p) { return simd::load_bf16x8(p); }
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(bf16_t* p, __m256 v) { simd::store_bf16x8(p, v); }
#endif

#if defined(__AVX512F__)
// The float offsets of one channel's 16 consecutive positions in a plane of 16-channel blocks:
// 0, 16, .., 240.
inline __m512i every16th() {
  return _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
}
#endif

// out's plain element e0 + i = src[i], i < len: a tile written in part (the rest is another
// thread's), element by element.
template <typename T>
void scatter_plain(const float* src, const CodecWalk& b, int64_t e0, int64_t len, T* out) {
  const int64_t B = b.block;
  for_plane_runs(b, e0, len, [&](int64_t i0, int64_t run, int64_t offset) {
    T* dst = out + offset;
    int64_t i = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>)
      if (B == 16)
        for (; i + 16 <= run; i += 16) _mm512_i32scatter_ps(dst + 16 * i, every16th(), _mm512_loadu_ps(src + i0 + i), 4);
#endif
    for (; i < run; ++i) narrow(src[i0 + i], dst[B * i]);
  });
}

// dst[c * dst_stride + i] = src[i * src_stride + c] for i, c < 16 (a 16 x 16 transpose, f32 or
// bf16 on either side), or false without AVX-512.
template <typename S, typename D>
inline bool transpose16(const S* src, int64_t src_stride, D* dst, int64_t dst_stride) {
#if defined(__AVX512F__)
  __m512 r[16], t[16];
  // Rows i, i + 1 loaded and interleaved at once: a loop of the 16 loads alone into r, GCC made a
  // memcpy to the stack (a call and a round trip through memory, 15% of the blocked quantize).
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: (row i, row i+1) interleaved by pairs
    const __m512 a = load16(src + i * src_stride), b = load16(src + (i + 1) * src_stride);
    t[i] = _mm512_unpacklo_ps(a, b);
    t[i + 1] = _mm512_unpackhi_ps(a, b);
  }
  for (int i = 0; i < 16; i += 4) {  // r[i + j], lane L: column 4L + j of rows i..i+3
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {  // column 4L + j: lane L of r[j], r[4 + j], r[8 + j], r[12 + j]
    const __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
    const __m512 v0 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44), v1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
    store16(dst + (0 + j) * dst_stride, _mm512_shuffle_f32x4(u0, v0, 0x88));
    store16(dst + (4 + j) * dst_stride, _mm512_shuffle_f32x4(u0, v0, 0xDD));
    store16(dst + (8 + j) * dst_stride, _mm512_shuffle_f32x4(u1, v1, 0x88));
    store16(dst + (12 + j) * dst_stride, _mm512_shuffle_f32x4(u1, v1, 0xDD));
  }
  return true;
#else
  (void)src, (void)src_stride, (void)dst, (void)dst_stride;
  return false;
#endif
}

// dst[c * dst_stride + i] = src[i * src_stride + c] for i, c < 8 (an 8 x 8 transpose, f32 or bf16
// on either side), or false without AVX2.
template <typename S, typename D>
inline bool transpose8(const S* src, int64_t src_stride, D* dst, int64_t dst_stride) {
#if defined(__AVX2__)
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {  // per 128-bit lane: (row i, row i+1) interleaved
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // u[i + j], lane L: column 4L + j of rows i..i+3
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {  // column j from the low lanes, column 4 + j from the high ones
    store8(dst + j * dst_stride, _mm256_permute2f128_ps(u[j], u[4 + j], 0x20));
    store8(dst + (4 + j) * dst_stride, _mm256_permute2f128_ps(u[j], u[4 + j], 0x31));
  }
  return true;
#else
  (void)src, (void)src_stride, (void)dst, (void)dst_stride;
  return false;
#endif
}

// The square vector transposes that tile B channels: 16 (with AVX-512) or 8 where they divide B
// (B = 16 or 8 for nChw16c / nChw8c; B = C for NHWC, walked as one block of all channels), else 0.
inline int64_t transpose_width(int64_t B) {
#if defined(__AVX512F__)
  if (B % 16 == 0) return 16;
#endif
  return B % 8 == 0 ? 8 : 0;
}

// A W x W transpose (transpose16 / transpose8), or false where this CPU has no vector one.
template <typename S, typename D>
inline bool transpose_block(int64_t W, const S* src, int64_t src_stride, D* dst, int64_t dst_stride) {
  if (W == 16) return transpose16(src, src_stride, dst, dst_stride);
  return W == 8 && transpose8(src, src_stride, dst, dst_stride);
}

// W positions x B channels at src (rows B apart) -> B planes at dst (plane apart), as W x W
// transposes, or false (nothing written) where this CPU has no vector one.
template <typename S, typename D>
inline bool transpose_strip(int64_t W, int64_t B, const S* src, int64_t src_stride, D* dst, int64_t dst_stride,
                            bool to_planes) {
  for (int64_t k = 0; k < B; k += W) {
    const bool done = to_planes ? transpose_block(W, src + k, src_stride, dst + k * dst_stride, dst_stride)
                                : transpose_block(W, src + k * src_stride, src_stride, dst + k, dst_stride);
    if (!done) return false;  // the first one: this CPU has none
  }
  return true;
}

// (plane, B) at src -> (B, plane) at dst: src[s * B + k] -> dst[k * plane + s], from f32 or bf16.
template <typename T>
void transpose_to_planes(const T* src, float* dst, int64_t plane, int64_t B) {
  const int64_t W = transpose_width(B);
  int64_t s = 0;
  for (; W && s + W <= plane && transpose_strip(W, B, src + s * B, B, dst + s, plane, true); s += W) {
  }
  for (; s < plane; ++s)
    for (int64_t k = 0; k < B; ++k) dst[k * plane + s] = widen(src[s * B + k]);
}

// And back, into f32 or bf16.
template <typename T>
void transpose_from_planes(const float* src, T* dst, int64_t plane, int64_t B) {
  const int64_t W = transpose_width(B);
  int64_t s = 0;
  for (; W && s + W <= plane && transpose_strip(W, B, src + s, plane, dst + s * B, B, false); s += W) {
  }
  for (; s < plane; ++s)
    for (int64_t k = 0; k < B; ++k) narrow(src[k * plane + s], dst[s * B + k]);
}

}  // namespace

template <typename T>
const float* PlainTile::read(const T* x, int64_t e0) {
  const int64_t t = tile_of(e0);
  if (t != tile_) {
    transpose_to_planes(x + t * len_, buf_.get(), b_.plane, b_.block);
    hold(t);
  }
  return buf_.get() + (e0 - t * len_);
}

template <typename T>
float* PlainTile::write(T* out, int64_t e0, int64_t n) {
  const int64_t t = tile_of(e0);
  if (t != tile_) {
    flush(out);
    hold(t);
    lo_ = hi_ = e0;
  }
  hi_ = e0 + n;
  return buf_.get() + (e0 - t * len_);
}

template <typename T>
void PlainTile::flush(T* out) {
  if (tile_ < 0 || hi_ == lo_) return;
  if (hi_ - lo_ == len_) {  // the whole tile
    transpose_from_planes(buf_.get(), out + tile_ * len_, b_.plane, b_.block);
  } else {  // part of it (the rest is another thread's)
    scatter_plain(buf_.get() + (lo_ - tile_ * len_), b_, lo_, hi_ - lo_, out);
  }
  lo_ = hi_;
}

// A run across tiles (a group or bucket of several planes: small planes, e.g. 4 x 4) piece by
// piece from the tiles' copies: the runs rise, so each tile is transposed once, as for the runs
// within one (element by element, each element's place took six integer divisions).
template <typename T>
const float* PlainRuns::read(const T* x, int64_t e0, int64_t n) {
  if (tile_.holds(e0, n)) return tile_.read(x, e0);
  for_tile_pieces(e0, n, [&](int64_t e, int64_t len) {
    std::memcpy(run_.get() + (e - e0), tile_.read(x, e), static_cast<size_t>(len) * sizeof(float));
  });
  return run_.get();
}

template <typename T>
float* PlainRuns::write(T* out, int64_t e0, int64_t n) {
  finish_run(out);
  if (tile_.holds(e0, n)) return tile_.write(out, e0, n);
  pending_e0_ = e0;
  pending_n_ = n;
  return run_.get();
}

template <typename T>
void PlainRuns::finish(T* out) {
  finish_run(out);
  tile_.flush(out);
}

template <typename T>
void PlainRuns::finish_run(T* out) {
  const int64_t e0 = pending_e0_;
  for_tile_pieces(e0, pending_n_, [&](int64_t e, int64_t len) {
    std::memcpy(tile_.write(out, e, len), run_.get() + (e - e0), static_cast<size_t>(len) * sizeof(float));
  });
  pending_n_ = 0;
}

// The element types the codecs walk: f32, and bf16 (autocast's saved tensors).
template const float* PlainRuns::read(const float*, int64_t, int64_t);
template const float* PlainRuns::read(const bf16_t*, int64_t, int64_t);
template float* PlainRuns::write(float*, int64_t, int64_t);
template float* PlainRuns::write(bf16_t*, int64_t, int64_t);
template void PlainRuns::finish(float*);
template void PlainRuns::finish(bf16_t*);

int64_t group_at_tile_edge(const GroupGeometry& g, const CodecWalk& walk, int64_t gi, int64_t limit) {
  if (!walk.channels || walk.nhwc) return gi;
  const int64_t tile = walk.block * walk.plane, end = std::min(g.groups(), gi + limit);
  for (int64_t k = gi; k < end; ++k)
    if (g.group_start(k) % tile == 0) return k;
  return gi;
}

#pragma GCC diagnostic pop

}  // namespace packrat
