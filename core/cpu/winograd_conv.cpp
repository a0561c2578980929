#include "core/cpu/winograd_conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/cpu/dnnl_context.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"
#include "core/half.h"
#include "core/parallel.h"

#include "core/cpu/bf16_simd.h"

namespace packrat::cpu {

bool winograd_bf16_serves(const ConvGeometry& g) {
#if defined(__AVX512BF16__)
  // The weights' transform, 16 Cin x Cout values a call, pays off over enough tiles: ResNet-18's
  // 512 channels at 4x4 and batch 64 (256 tiles) ran 0.95x the direct kernel, 256 at 8x8 (1024
  // tiles) 1.5x (BM_ResNet18Conv3x3, docs/precision.md).
  // And the products pay off over the transforms, (Cin x Cout) against (Cin + Cout) a tile, from 64
  // channels on each side: the quickstart's ResNet-20 (16 and 32 channels) trained at 1241 img/s
  // through it against the direct kernels' 1643.
  constexpr int64_t kMinTiles = 1024, kMinChannels = 64;
  if (g.N * ((g.H + 1) / 2) * ((g.W + 1) / 2) < kMinTiles || g.Cin < kMinChannels || g.Cout < kMinChannels)
    return false;
  if (!bf16_kernels() || amx_kernels() || native_blocked_layout() != Layout::nChw16c) return false;
  if (channels_last_convolutions(DType::bf16) || conv_algorithm_setting() == ConvAlgorithm::Direct) return false;
  return g.dtype == DType::bf16 && g.groups == 1 && g.KH == 3 && g.KW == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.pad_h == 1 && g.pad_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 && g.OH == g.H && g.OW == g.W &&
         g.Cin % 16 == 0 && g.Cout % 16 == 0;
#else
  (void)g;
  return false;
#endif
}

namespace {

#if defined(__AVX512BF16__)
// GCC 12 warns about the undefined pass-through operand inside the AVX-512 intrinsics (a false
// positive of its headers, as in bf16_simd.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// A transformed input's 16 values rounded to bf16 for the products by VCVTNEPS2BF16 (denormals to
// zero: they are far below what the products resolve); outputs round as Tensor::to does.
inline void store_products_bf16x16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// The weights' transforms U = G w G^T, rounded to bf16 and laid out for vdpbf16ps: (16 positions,
// in/2, out, 2), channel pairs interleaved. `flipped`: for the data gradient, w turned half a
// circle with in and out swapped (in = the convolution's Cout). 16 outputs a register (their taps
// gathered), two inputs at a time, so that each position's pair row is one 64-byte store (the
// scalar loop, pair by pair, took 40% of a 512-channel forward).
Tensor transformed_weights(const Tensor& w, int64_t cin, int64_t cout, bool flipped) {
  PACKRAT_CHECK(w.dtype() == DType::f32 && w.layout() == Layout::Plain, "winograd: the weight {} is not plain f32",
                w.describe());
  const int64_t in = flipped ? cout : cin, out = flipped ? cin : cout;
  Tensor u = Tensor::empty(Shape{16, in / 2, out, 2}, DType::bf16, Layout::Plain, MemTag::Workspace,
                           Device::cpu());  // (position, in/2, out, 2)
  const float* wp = static_cast<const float*>(w.raw());  // (Cout, Cin, 3, 3)
  uint32_t* up = static_cast<uint32_t*>(u.raw());        // (position, in/2, out) pairs
  // Lane o's taps: w[o0 + o][i] (stride Cin * 9), or flipped w[i][o0 + o] (stride 9).
  const __m512i lanes = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(static_cast<int>(flipped ? 9 : cin * 9)));
  const __m512 half = _mm512_set1_ps(0.5f);
  auto bf16_value = [](__m512 v) { return _mm512_castsi512_ps(_mm512_slli_epi32(simd::bf16_bits16(v), 16)); };
  const int64_t out_blocks = out / 16;
  parallel_for(0, (in / 2) * out_blocks, [&](int64_t job) {
    const int64_t pair = job / out_blocks, o0 = job % out_blocks * 16;
    __m512i bits[2][16];  // (input of the pair, position): 16 outputs' bf16 in 32-bit lanes
    for (int e = 0; e < 2; ++e) {
      const int64_t i = 2 * pair + e;
      const float* base = wp + (flipped ? (i * cin + o0) : (o0 * cin + i)) * 9;
      __m512 g[3][3];
      for (int r = 0; r < 3; ++r)
        for (int q = 0; q < 3; ++q) {
          const int tap = flipped ? (2 - r) * 3 + (2 - q) : r * 3 + q;
          g[r][q] = bf16_value(_mm512_i32gather_ps(lanes, base + tap, 4));  // as autocast reads w
        }
      __m512 t[4][3];  // G g
      for (int q = 0; q < 3; ++q) {
        t[0][q] = g[0][q];
        t[1][q] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(g[0][q], g[1][q]), g[2][q]));
        t[2][q] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(g[0][q], g[1][q]), g[2][q]));
        t[3][q] = g[2][q];
      }
      for (int r = 0; r < 4; ++r) {
        bits[e][r * 4 + 0] = simd::bf16_bits16(t[r][0]);
        bits[e][r * 4 + 1] = simd::bf16_bits16(_mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(t[r][0], t[r][1]), t[r][2])));
        bits[e][r * 4 + 2] = simd::bf16_bits16(_mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(t[r][0], t[r][1]), t[r][2])));
        bits[e][r * 4 + 3] = simd::bf16_bits16(t[r][2]);
      }
    }
    for (int p = 0; p < 16; ++p)
      _mm512_storeu_si512(up + (p * (in / 2) + pair) * out + o0,
                          _mm512_or_si512(bits[0][p], _mm512_slli_epi32(bits[1][p], 16)));
  });
  return u;
}

constexpr int kRows = 6;        // tiles a micro-kernel call
constexpr int kChunk = 64;      // output channels a block's products cover at a time
constexpr int64_t kBlockBytes = 192 * 1024;  // a block's transformed inputs

// c[r][0, 16 * NC) = sum over channel pairs p of a[r][p] . b[p][0, 16 * NC): kRows tiles' rows of
// bf16 channel pairs (lda values apart) against b (pairs, ldb outputs, 2), in f32.
template <int NC>
void micro_kernel(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t pairs, float* c,
                  int64_t ldc) {
  __m512 acc[kRows][NC];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < NC; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[NC];
    for (int j = 0; j < NC; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + (p * ldb + 16 * j) * 2));
    for (int r = 0; r < kRows; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, 4);
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int j = 0; j < NC; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, acc[r][j]);
}

void micro_kernel_n(int nc, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t pairs, float* c,
                    int64_t ldc) {
  switch (nc) {
    case 1: micro_kernel<1>(a, lda, b, ldb, pairs, c, ldc); break;
    case 2: micro_kernel<2>(a, lda, b, ldb, pairs, c, ldc); break;
    case 3: micro_kernel<3>(a, lda, b, ldb, pairs, c, ldc); break;
    default: micro_kernel<4>(a, lda, b, ldb, pairs, c, ldc); break;
  }
}

// The convolution of `in` (N, cin, H, W) bf16 nChw16c with the transformed weights u into `out`
// (N, cout, H, W) nChw16c, OutT = bf16_t or float, plus bias (cout) where given.
template <typename OutT>
void winograd_f2x3(const bf16_t* in, const uint16_t* u, const float* bias, OutT* out, int64_t n, int64_t cin,
                   int64_t cout, int64_t h, int64_t w) {
  const int64_t th = (h + 1) / 2, tw = (w + 1) / 2, tiles = n * th * tw;
  const int64_t cin_blocks = cin / 16, cout_blocks = cout / 16;
  const int64_t tb = std::clamp<int64_t>(kBlockBytes / (32 * cin) / kRows * kRows, kRows, 16 * kRows);  // tiles a block
  const int64_t blocks = (tiles + tb - 1) / tb;
  const int threads = num_threads();
  Tensor v_all = Tensor::empty(Shape{threads, 16, tb, cin}, DType::bf16, Layout::Plain, MemTag::Workspace,
                               Device::cpu());  // (thread, position, tile, cin) transformed inputs
  std::memset(v_all.raw(), 0, v_all.nbytes());  // (a last block's rows past its tiles are read, never stored)
  Tensor m_all = Tensor::empty(Shape{threads, 16, tb, kChunk}, DType::f32, Layout::Plain, MemTag::Workspace,
                               Device::cpu());  // (thread, position, tile, 64 outputs) products
  auto pixel = [&](int64_t b, int64_t cb, int64_t y, int64_t x, int64_t blocks_c) {
    return ((b * blocks_c + cb) * h + y) * w * 16 + x * 16;
  };
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int t = omp_get_thread_num();
    uint16_t* v = static_cast<uint16_t*>(v_all.raw()) + t * 16 * tb * cin;
    float* m = static_cast<float*>(m_all.raw()) + t * 16 * tb * kChunk;
    const int64_t t0 = blk * tb, nt = std::min(tb, tiles - t0);
    // The input transform V = B^T d B, 16 channels at a time.
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t tile = t0 + i, b = tile / (th * tw), ty = tile / tw % th, tx = tile % tw;
      for (int64_t cb = 0; cb < cin_blocks; ++cb) {
        __m512 d[4][4];
        for (int r = 0; r < 4; ++r) {
          const int64_t y = 2 * ty - 1 + r;
          for (int s = 0; s < 4; ++s) {
            const int64_t x = 2 * tx - 1 + s;
            d[r][s] = (y < 0 || y >= h || x < 0 || x >= w) ? _mm512_setzero_ps()
                                                           : simd::load_bf16x16(in + pixel(b, cb, y, x, cin_blocks));
          }
        }
        __m512 e[4][4];
        for (int s = 0; s < 4; ++s) {
          e[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
          e[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
          e[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
          e[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
        }
        const int64_t position = tb * cin;
        for (int r = 0; r < 4; ++r) {
          uint16_t* o = v + (r * 4 * tb + i) * cin + cb * 16;
          store_products_bf16x16(o, _mm512_sub_ps(e[r][0], e[r][2]));
          store_products_bf16x16(o + position, _mm512_add_ps(e[r][1], e[r][2]));
          store_products_bf16x16(o + 2 * position, _mm512_sub_ps(e[r][2], e[r][1]));
          store_products_bf16x16(o + 3 * position, _mm512_sub_ps(e[r][1], e[r][3]));
        }
      }
    }
    const int64_t rows = (nt + kRows - 1) / kRows * kRows;  // rows past nt: stale inputs, never stored
    for (int64_t k0 = 0; k0 < cout; k0 += kChunk) {
      const int64_t kc = std::min<int64_t>(kChunk, cout - k0);
      for (int p = 0; p < 16; ++p)
        for (int64_t r = 0; r < rows; r += kRows)
          micro_kernel_n(static_cast<int>(kc / 16), v + (p * tb + r) * cin, cin, u + (p * (cin / 2) * cout + k0) * 2,
                         cout, cin / 2, m + (p * tb + r) * kChunk, kChunk);
      // The output transform Y = A^T M A, 16 output channels at a time.
      for (int64_t i = 0; i < nt; ++i) {
        const int64_t tile = t0 + i, b = tile / (th * tw), ty = tile / tw % th, tx = tile % tw;
        for (int64_t k = 0; k < kc; k += 16) {
          __m512 q[4][4];
          for (int r = 0; r < 4; ++r)
            for (int s = 0; s < 4; ++s) q[r][s] = _mm512_loadu_ps(m + ((r * 4 + s) * tb + i) * kChunk + k);
          __m512 r0[4], r1[4];
          for (int s = 0; s < 4; ++s) {
            r0[s] = _mm512_add_ps(_mm512_add_ps(q[0][s], q[1][s]), q[2][s]);
            r1[s] = _mm512_sub_ps(_mm512_sub_ps(q[1][s], q[2][s]), q[3][s]);
          }
          const __m512 bv = bias ? _mm512_loadu_ps(bias + k0 + k) : _mm512_setzero_ps();
          const __m512 y[2][2] = {
              {_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0[0], r0[1]), r0[2]), bv),
               _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r0[1], r0[2]), r0[3]), bv)},
              {_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r1[0], r1[1]), r1[2]), bv),
               _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r1[1], r1[2]), r1[3]), bv)}};
          const int64_t cb = (k0 + k) / 16;
          for (int r = 0; r < 2; ++r)
            for (int s = 0; s < 2; ++s) {
              const int64_t yy = 2 * ty + r, xx = 2 * tx + s;
              if (yy >= h || xx >= w) continue;  // the odd edge's tiles
              OutT* o = out + pixel(b, cb, yy, xx, cout_blocks);
              if constexpr (std::is_same_v<OutT, float>) _mm512_storeu_ps(o, y[r][s]);
              else simd::store_bf16x16(o, y[r][s]);
            }
        }
      }
    }
  }
}

#pragma GCC diagnostic pop
#endif  // __AVX512BF16__

Tensor bf16_blocked(const Tensor& t) {
  TagScope copies(MemTag::Workspace);
  return to_layout(t.to(DType::bf16), Layout::nChw16c);
}

}  // namespace

Tensor winograd_bf16_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g) {
  PACKRAT_CHECK(winograd_bf16_serves(g), "winograd_bf16_forward: does not serve {}", g.key());
  Tensor y = empty_cpu(Shape{g.N, g.Cout, g.H, g.W}, DType::bf16, Layout::nChw16c);  // (N, Cout, H, W)
#if defined(__AVX512BF16__)
  const Tensor src = x.dtype() == DType::bf16 && x.layout() == Layout::nChw16c ? x : bf16_blocked(x);
  const Tensor u = transformed_weights(w, g.Cin, g.Cout, false);
  winograd_f2x3(static_cast<const bf16_t*>(src.raw()), static_cast<const uint16_t*>(u.raw()),
                g.has_bias ? static_cast<const float*>(b.raw()) : nullptr, static_cast<bf16_t*>(y.raw()), g.N, g.Cin,
                g.Cout, g.H, g.W);
#endif
  return y;
}

Tensor winograd_bf16_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) {
  PACKRAT_CHECK(winograd_bf16_serves(g), "winograd_bf16_backward_data: does not serve {}", g.key());
  Tensor dx = empty_cpu(Shape{g.N, g.Cin, g.H, g.W}, DType::f32, Layout::nChw16c);  // (N, Cin, H, W)
#if defined(__AVX512BF16__)
  const Tensor src = gy.dtype() == DType::bf16 && gy.layout() == Layout::nChw16c ? gy : bf16_blocked(gy);
  const Tensor u = transformed_weights(w, g.Cin, g.Cout, true);
  winograd_f2x3(static_cast<const bf16_t*>(src.raw()), static_cast<const uint16_t*>(u.raw()), nullptr,
                static_cast<float*>(dx.raw()), g.N, g.Cout, g.Cin, g.H, g.W);
#endif
  return dx;
}

}  // namespace packrat::cpu
