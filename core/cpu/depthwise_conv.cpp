#include "core/cpu/depthwise_conv.h"

#include <algorithm>
#include <cstring>

#include "core/cpu/bf16_simd.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

constexpr int64_t B = channel_block(Layout::nChw16c);  // the loop's lanes: channels a slice

bool depthwise_loop_serves(const ConvGeometry& g) {
  return g.groups > 1 && g.groups == g.Cin && g.Cin == g.Cout && g.Cin % B == 0;
}

namespace {

// Where sample n's 16-channel slice s of a (N, C, H, W) operand lies: offset(n, s) its first value,
// `pixel` the step from one (h, w) to the next (16 in nChw16c, C in NHWC).
struct SliceWalk {
  int64_t sample, slice, pixel;
  int64_t offset(int64_t n, int64_t s) const { return n * sample + s * slice; }
};

SliceWalk slice_walk(const Tensor& t, const char* what) {
  const int64_t C = t.shape()[1], HW = t.shape()[2] * t.shape()[3];
  if (t.layout() == Layout::NHWC) return {HW * C, B, C};
  if (t.layout() == Layout::nChw16c) return {C * HW, HW * B, B};
  fail("depthwise_backward_weights: {} {} is neither nChw16c nor NHWC", what, t.describe());
}

// 16 lanes of f32 as GCC's vector extension: a zmm register with AVX-512, a ymm pair with AVX2
// (where GCC notes that such a return value's ABI differs from AVX-512's: these functions are
// internal and inlined, so no call crosses the two).
#pragma GCC diagnostic ignored "-Wpsabi"
using f32x16 = float __attribute__((vector_size(64)));
inline f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// A bf16's bits are the upper half of its f32's: widened by bf16_simd.h's loads (GCC's
// __builtin_convertvector from 16 to 32 bits made this loop twice as slow as f32's).
inline f32x16 load16(const bf16_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<f32x16>(simd::load_bf16x16(p));
#elif defined(__AVX2__)
  const __m256 halves[2] = {simd::load_bf16x8(p), simd::load_bf16x8(p + 8)};
  f32x16 v;
  std::memcpy(&v, halves, sizeof v);
  return v;
#else
  f32x16 v;
  for (int i = 0; i < 16; ++i) v[i] = to_f32(p[i]);
  return v;
#endif
}

// The operands, their walks and the geometry, for one call.
template <typename TX, typename TG>
struct Operands {
  const TX* x;
  SliceWalk xw;
  const TG* gy;
  SliceWalk gyw;
  const ConvGeometry& g;
};

// Adds output row oh of sample n, slice s, to acc (KH*KW sums of 16 lanes) and bias: every
// (ow, kh, kw) whose input pixel lies inside the image. KH and KW are the geometry's when known
// at compile time (acc then held in registers by the caller), 0 to read them from g. Kernel rows
// outside the image are skipped whole, and the row's interior pixels (every kw inside) need no test.
template <int KH, int KW, typename TX, typename TG>
inline void add_row(const Operands<TX, TG>& o, int64_t n, int64_t s, int64_t oh, f32x16* acc, f32x16& bias) {
  const ConvGeometry& g = o.g;
  const int64_t kh_n = KH ? KH : g.KH, kw_n = KW ? KW : g.KW;
  const int64_t xp = o.xw.pixel, gp = o.gyw.pixel;
  const TX* xb = o.x + o.xw.offset(n, s);                       // (H, W, 16), pixels xp apart
  const TG* gyrow = o.gy + o.gyw.offset(n, s) + oh * g.OW * gp;  // (OW, 16), pixels gp apart
  for (int64_t ow = 0; ow < g.OW; ++ow) bias += load16(gyrow + ow * gp);
  // Interior outputs [ow_lo, ow_hi): every kw's input column inside [0, W).
  const int64_t span = (kw_n - 1) * g.dilation_w;
  const int64_t ow_lo = std::min(g.OW, (g.pad_w + g.stride_w - 1) / g.stride_w);
  const int64_t ow_hi = std::max(ow_lo, std::min(g.OW, (g.W - 1 - span + g.pad_w) / g.stride_w + 1));
#pragma GCC unroll 8
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
    if (ih < 0 || ih >= g.H) continue;
    const TX* row = xb + ih * g.W * xp;
    f32x16* a = acc + kh * kw_n;  // (KW, 16) this kernel row's sums
    auto edge = [&](int64_t ow) {
      const f32x16 gv = load16(gyrow + ow * gp);
#pragma GCC unroll 8
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
        if (iw >= 0 && iw < g.W) a[kw] += load16(row + iw * xp) * gv;
      }
    };
    for (int64_t ow = 0; ow < ow_lo; ++ow) edge(ow);
    for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
      const f32x16 gv = load16(gyrow + ow * gp);
      const TX* in = row + (ow * g.stride_w - g.pad_w) * xp;
#pragma GCC unroll 8
      for (int64_t kw = 0; kw < kw_n; ++kw) a[kw] += load16(in + kw * g.dilation_w * xp) * gv;
    }
    for (int64_t ow = ow_hi; ow < g.OW; ++ow) edge(ow);
  }
}

// The sums of slices [s0, s1): sums (s1 - s0, KH*KW + 1, 16), zero on entry, the bias's last.
// Samples in blocks whose operands (these slices of them) fit in about half an L2 cache; within a
// block slice by slice, each slice's sums held in registers over the block's samples. Slice by
// slice over the whole tensor instead read an NHWC tensor one 64-byte line in C * 4 bytes at a
// time, far ahead of the prefetchers (2x slower); the block's other slices then come from L2.
template <int KH, int KW, typename TX, typename TG>
void slice_range_sums(const Operands<TX, TG>& o, int64_t s0, int64_t s1, f32x16* sums) {
  const ConvGeometry& g = o.g;
  const int64_t K = g.KH * g.KW;
  const int64_t sample_bytes = (s1 - s0) * B * (g.H * g.W * int64_t{sizeof(TX)} + g.OH * g.OW * int64_t{sizeof(TG)});
  const int64_t block = std::max<int64_t>(1, (int64_t{512} << 10) / sample_bytes);
  for (int64_t n0 = 0; n0 < g.N; n0 += block) {
    const int64_t n1 = std::min(g.N, n0 + block);
    for (int64_t s = s0; s < s1; ++s) {
      f32x16* sum = sums + (s - s0) * (K + 1);  // (KH*KW + 1, 16)
      if constexpr (KH > 0) {
        f32x16 acc[KH * KW];
        f32x16 bias = sum[K];
#pragma GCC unroll 25
        for (int k = 0; k < KH * KW; ++k) acc[k] = sum[k];
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t oh = 0; oh < g.OH; ++oh) add_row<KH, KW>(o, n, s, oh, acc, bias);
#pragma GCC unroll 25
        for (int k = 0; k < KH * KW; ++k) sum[k] = acc[k];
        sum[K] = bias;
      } else {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t oh = 0; oh < g.OH; ++oh) add_row<0, 0>(o, n, s, oh, sum, sum[K]);
      }
    }
  }
}

template <int KH, int KW, typename TX, typename TG>
void all_slice_sums(const Operands<TX, TG>& o, f32x16* sums) {
  const ConvGeometry& g = o.g;
  const int64_t K = g.KH * g.KW, slices = g.Cin / B;
  // Contiguous ranges of slices, one a thread: each channel's sums in one order whatever the threads.
  const int64_t slice_work = g.N * g.OH * g.OW * K * B;
  parallel_chunks(slices, std::max<int64_t>(1, kMinParallelWork / slice_work), [&](int64_t s0, int64_t s1) {
    slice_range_sums<KH, KW>(o, s0, s1, sums + s0 * (K + 1));
  });
}

}  // namespace

void depthwise_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb) {
  const SliceWalk xw = slice_walk(x, "x"), gyw = slice_walk(gy, "gy");
  const int64_t K = g.KH * g.KW, slices = g.Cin / B;
  Tensor sums;  // (slices, KH*KW + 1, 16): the bias's last
  {
    TagScope scratch(MemTag::Workspace);
    sums = zeros_cpu(Shape{slices, K + 1, B});
  }
  auto* s = reinterpret_cast<f32x16*>(sums.data<float>());
  with_f32_or_bf16_data(x, "depthwise_backward_weights", [&](auto* xs) {
    with_f32_or_bf16_data(gy, "depthwise_backward_weights", [&](auto* gys) {
      const Operands o{xs, xw, gys, gyw, g};
      if (g.KH == 3 && g.KW == 3) all_slice_sums<3, 3>(o, s);
      else if (g.KH == 5 && g.KW == 5) all_slice_sums<5, 5>(o, s);
      else all_slice_sums<0, 0>(o, s);
    });
  });
  gw = empty_cpu(Shape{g.Cout, 1, g.KH, g.KW});  // (C, 1, KH, KW) plain
  if (g.has_bias) gb = empty_cpu(Shape{g.Cout});  // (C)
  float* gws = gw.data<float>();
  float* gbs = g.has_bias ? gb.data<float>() : nullptr;
  const float* sum = sums.data<float>();
  for (int64_t c = 0; c < g.Cin; ++c) {
    const float* sc = sum + (c / B) * (K + 1) * B + c % B;  // channel c's K + 1 sums, 16 apart
    for (int64_t k = 0; k < K; ++k) gws[c * K + k] = sc[k * B];
    if (gbs) gbs[c] = sc[K * B];
  }
}

}  // namespace packrat::cpu
