// Batch normalization as OpenMP loops over the buffer as it lies (plain, blocked or NHWC): one
// pass for the per-channel sums (plain and blocked: threads split the channels, so no
// cross-thread reduction and no barrier inside a pass; NHWC: threads split the pixels, each
// summing every channel, and their sums are added after), one pass for the elementwise part.
// Sums go through float partials of at most 256 values into double.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/cpu/batchnorm.h"
#include "core/cpu/bf16_simd.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/loops.h"
#include "core/half.h"
#include "core/parallel.h"

namespace packrat::cpu {

namespace {

// x (and the forward's y) are f32, bf16 or f16 (autocast: the 16-bit input is read as it is saved,
// each value widened exactly, so the sums and outputs are those of its f32 copy); gradients are f32.

// A 4-d buffer seen as N x U slabs of HW x L floats, where slab (n, u) holds channels
// [u * L, (u + 1) * L): L = 16 for nChw16c, 8 for nChw8c (lanes interleaved), 1 for plain.
struct Slabs {
  int64_t N, U, HW;
  int64_t count() const { return N * HW; }  // values per channel
};

// Per-channel sums over the slabs: Grad ? (sum g, sum g * (x - center)) : (sum (x - center),
// sum (x - center)^2). Lanes accumulate in float over chunks of 256 values, then in double.
template <int L, bool Grad, typename T>
void channel_sums(const T* x, const float* g, const Slabs& s, const float* center, double* sum_out,
                  double* sum2_out) {
  constexpr int64_t kChunk = 256;
  rows_for(s.U, s.N * s.HW * L, [&](int64_t u) {
    double a[L] = {}, b[L] = {};
    float m[L];
    for (int l = 0; l < L; ++l) m[l] = center[u * L + l];
    for (int64_t n = 0; n < s.N; ++n) {
      const int64_t base = (n * s.U + u) * s.HW * L;
      const T* px = x + base;
      const float* pg = Grad ? g + base : nullptr;
      for (int64_t i0 = 0; i0 < s.HW; i0 += kChunk) {
        const int64_t i1 = std::min(s.HW, i0 + kChunk);
        float fa[L] = {}, fb[L] = {};
        if constexpr (L == 1) {
          // One channel's run: GCC keeps a plain sum in order (scalar, one add's latency a value)
          // unless told that it may split it across vector lanes.
          float sa = 0.0f, sb = 0.0f;
#pragma omp simd reduction(+ : sa, sb)
          for (int64_t i = i0; i < i1; ++i) {
            const float v = to_f32(px[i]) - m[0];
            sa += Grad ? pg[i] : v;
            sb += (Grad ? pg[i] : v) * v;
          }
          fa[0] = sa;
          fb[0] = sb;
        } else {
          // U partial sums a lane, so that U adds are in flight, not one add's latency a position.
          constexpr int U = 64 / L;
          float pa[U][L] = {}, pb[U][L] = {};  // (U, L)
          auto add = [&](float* qa, float* qb, int64_t i) {
            for (int l = 0; l < L; ++l) {
              const float v = to_f32(px[i * L + l]) - m[l];
              const float gv = Grad ? pg[i * L + l] : v;
              qa[l] += gv;
              qb[l] += gv * v;
            }
          };
          int64_t i = i0;
          for (; i + U <= i1; i += U)
            for (int u = 0; u < U; ++u) add(pa[u], pb[u], i + u);
          for (; i < i1; ++i) add(pa[0], pb[0], i);
          for (int u = 0; u < U; ++u)
            for (int l = 0; l < L; ++l) {
              fa[l] += pa[u][l];
              fb[l] += pb[u][l];
            }
        }
        for (int l = 0; l < L; ++l) {
          a[l] += fa[l];
          b[l] += fb[l];
        }
      }
    }
    for (int l = 0; l < L; ++l) {
      sum_out[u * L + l] = a[l];
      sum2_out[u * L + l] = b[l];
    }
  });
}

// Values a 16-bit side of a slab is widened (or narrowed) on SIMD lanes at a time, in f32 buffers
// in L1: GCC leaves the per-value widening and rounding of a loop over a slab's lanes scalar, even
// under omp simd (BM_BatchNormBf16, nChw16c: 0.54-0.78 ms a forward, 0.30-0.52 ms so). NHWC
// rows vectorise as they are (a row's chunks are its few dozen channels: 1.3x slower so).
constexpr int64_t kWideChunk = 512;

// The elementwise pass, per channel c: Grad ? out = k (g - a - (x - m) b) : out = x k + a.
template <int L, bool Grad, typename T, typename O>
void affine_pass(const Slabs& s, const T* x, const float* g, O* out, const float* k, const float* a,
                 const float* b, const float* m) {
  static_assert(kWideChunk % L == 0, "a chunk holds whole positions");
  rows_for(s.N * s.U, s.HW * L, [&](int64_t nu) {
    const int64_t u = nu % s.U, base = nu * s.HW * L, total = s.HW * L;
    float kk[L], aa[L], bb[L], mm[L];
    for (int l = 0; l < L; ++l) {
      kk[l] = k[u * L + l];
      aa[l] = a[u * L + l];
      bb[l] = Grad ? b[u * L + l] : 0.0f;
      mm[l] = Grad ? m[u * L + l] : 0.0f;
    }
    const T* px = x + base;
    const float* pg = Grad ? g + base : nullptr;
    O* po = out + base;
    alignas(64) float xw[kWideChunk], ow[kWideChunk];  // a chunk of x widened, of out before it is narrowed
    for (int64_t i0 = 0; i0 < total; i0 += kWideChunk) {
      const int64_t n = std::min(kWideChunk, total - i0);  // whole positions of L lanes
      const float* xf = simd::f32_values(px + i0, n, xw);
      float* of = ow;
      if constexpr (std::is_same_v<O, float>) of = po + i0;
      for (int64_t i = 0; i < n; i += L)
        for (int l = 0; l < L; ++l) {
          if constexpr (Grad) of[i + l] = kk[l] * (pg[i0 + i + l] - aa[l] - (xf[i + l] - mm[l]) * bb[l]);
          else of[i + l] = xf[i + l] * kk[l] + aa[l];
        }
      if constexpr (!std::is_same_v<O, float>) simd::from_f32_run(ow, n, po + i0);
    }
  });
}

// NHWC: rows of C values, a row a pixel; the loops run along a row, so every read is sequential
// and vectorises over the channels (walking it as 16-channel slabs C values apart ran batchnorm
// at half the blocked layout's speed: ResNet-18's bf16 step on AMX, 12% of it against 7%).
template <bool Grad, typename T>
void channel_sums_nhwc(const T* x, const float* g, int64_t rows, int64_t C, const float* center, double* sum_out,
                       double* sum2_out) {
  constexpr int64_t kChunk = 256;
  const int threads = rows * C >= kMinParallelWork ? std::max(num_threads(), 1) : 1;
  std::vector<double> partial(static_cast<size_t>(2 * C * threads), 0.0);  // (threads, 2, C)
  parallel_for(0, threads, [&](int64_t t) {
    const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    double* a = partial.data() + 2 * C * t;
    double* b = a + C;
    std::vector<float> fa(static_cast<size_t>(C)), fb(static_cast<size_t>(C));  // (C,) a chunk's sums
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
      std::fill(fa.begin(), fa.end(), 0.0f);
      std::fill(fb.begin(), fb.end(), 0.0f);
      float* __restrict pa = fa.data();
      float* __restrict pb = fb.data();
      for (int64_t r = c0; r < std::min(r1, c0 + kChunk); ++r) {
        const T* px = x + r * C;
        const float* pg = Grad ? g + r * C : nullptr;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float v = to_f32(px[c]) - center[c];
          const float gv = Grad ? pg[c] : v;
          pa[c] += gv;
          pb[c] += gv * v;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        a[c] += pa[c];
        b[c] += pb[c];
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    double a = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      a += partial[static_cast<size_t>(2 * C * t + c)];
      b += partial[static_cast<size_t>(2 * C * t + C + c)];
    }
    sum_out[c] = a;
    sum2_out[c] = b;
  }
}

// The elementwise pass over NHWC rows, as affine_pass.
template <bool Grad, typename T, typename O>
void affine_pass_nhwc(int64_t rows, int64_t C, const T* x, const float* g, O* out, const float* k, const float* a,
                      const float* b, const float* m) {
  rows_for(rows, C, [&](int64_t r) {
    const T* px = x + r * C;
    O* po = out + r * C;
    if constexpr (Grad) {
      const float* pg = g + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) po[c] = from_f32<O>(k[c] * (pg[c] - a[c] - (to_f32(px[c]) - m[c]) * b[c]));
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) po[c] = from_f32<O>(to_f32(px[c]) * k[c] + a[c]);
    }
  });
}

Slabs slabs_of(const Tensor& x) {
  const int64_t block = channel_block(x.layout());
  return Slabs{x.dim(0), block ? x.dim(1) / block : x.dim(1), x.dim(2) * x.dim(3)};
}

// Calls fn(std::integral_constant<int, L>{}, px) with x's lanes L (see Slabs) and its data as
// const float*, const bf16_t* or const f16_t*.
template <typename Fn>
void with_lanes(const Tensor& x, Fn&& fn) {
  auto typed = [&](auto lanes) {
    switch (x.dtype()) {
      case DType::bf16: return fn(lanes, x.data<bf16_t>());
      case DType::f16: return fn(lanes, x.data<f16_t>());
      default: return fn(lanes, x.data<float>());
    }
  };
  switch (channel_block(x.layout())) {
    case 16: return typed(std::integral_constant<int, 16>{});
    case 8: return typed(std::integral_constant<int, 8>{});
    default: return typed(std::integral_constant<int, 1>{});
  }
}

// The first value of each channel, widened: the shift of the training sums.
std::vector<float> first_values(const Tensor& x) {
  const int64_t C = x.dim(1);
  std::vector<float> first(static_cast<size_t>(C));  // (C)
  with_lanes(x, [&](auto, const auto* px) {
    for (int64_t c = 0; c < C; ++c)
      first[static_cast<size_t>(c)] = to_f32(px[nchw_offset(x.layout(), C, x.dim(2), x.dim(3), 0, c, 0, 0)]);
  });
  return first;
}

void normalize_any(const Tensor& x, Tensor& y, const Tensor& weight, const Tensor& bias, const float* mean,
                   const float* var, float eps) {
  const int64_t C = x.dim(1);
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
    const double k = (weight.defined() ? weight.data<float>()[c] : 1.0) * invstd;
    scale[static_cast<size_t>(c)] = static_cast<float>(k);
    shift[static_cast<size_t>(c)] = static_cast<float>((bias.defined() ? bias.data<float>()[c] : 0.0) - mean[c] * k);
  }
  const Slabs s = slabs_of(x);
  with_lanes(x, [&](auto lanes, const auto* px) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    if (x.layout() == Layout::NHWC)
      affine_pass_nhwc<false>(s.count(), C, px, nullptr, y.data<T>(), scale.data(), shift.data(), nullptr, nullptr);
    else
      affine_pass<lanes.value, false>(s, px, nullptr, y.data<T>(), scale.data(), shift.data(), nullptr, nullptr);
  });
}

}  // namespace

void batchnorm_forward_training_loops(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                      Tensor& mean, Tensor& var) {
  const int64_t C = x.dim(1);
  const Slabs s = slabs_of(x);
  // Sums of x - K with K the channel's first value: no cancellation when |mean| >> std.
  const std::vector<float> shift = first_values(x);  // (C)
  std::vector<double> sum(static_cast<size_t>(C)), sum2(static_cast<size_t>(C));
  with_lanes(x, [&](auto lanes, const auto* px) {
    if (x.layout() == Layout::NHWC)
      channel_sums_nhwc<false>(px, nullptr, s.count(), C, shift.data(), sum.data(), sum2.data());
    else
      channel_sums<lanes.value, false>(px, nullptr, s, shift.data(), sum.data(), sum2.data());
  });
  mean = empty_cpu(Shape{C});  // (C)
  var = empty_cpu(Shape{C});   // (C), biased
  const double n = static_cast<double>(s.count());
  for (int64_t c = 0; c < C; ++c) {
    const double d = sum[static_cast<size_t>(c)] / n;  // mean - K
    mean.data<float>()[c] = static_cast<float>(shift[static_cast<size_t>(c)] + d);
    var.data<float>()[c] = static_cast<float>(std::max(0.0, sum2[static_cast<size_t>(c)] / n - d * d));
  }
  y = Tensor::empty_like(x);  // (N, C, H, W), x's layout and dtype
  normalize_any(x, y, weight, bias, mean.data<float>(), var.data<float>(), eps);
}

Tensor batchnorm_forward_inference_loops(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& mean, const Tensor& var, float eps) {
  Tensor y = Tensor::empty_like(x);  // (N, C, H, W), x's layout and dtype
  normalize_any(x, y, weight, bias, mean.data<float>(), var.data<float>(), eps);
  return y;
}

void batchnorm_backward_loops(const Tensor& x, const Tensor& gy_any, const Tensor& weight, bool has_bias,
                              const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                              Tensor& dweight, Tensor& dbias) {
  const int64_t C = x.dim(1);
  const Slabs s = slabs_of(x);
  const Tensor gy = to_layout(gy_any, x.layout());
  const float* m = mean.data<float>();
  std::vector<double> sdy(static_cast<size_t>(C)), sdyx(static_cast<size_t>(C));  // sum dy, sum dy * (x - mean)
  with_lanes(x, [&](auto lanes, const auto* px) {
    if (x.layout() == Layout::NHWC)
      channel_sums_nhwc<true>(px, gy.data<float>(), s.count(), C, m, sdy.data(), sdyx.data());
    else
      channel_sums<lanes.value, true>(px, gy.data<float>(), s, m, sdy.data(), sdyx.data());
  });
  const double n = static_cast<double>(s.count());
  // dx = k (dy - a - (x - mean) b): k = w invstd; training: a = sum dy / n, b = sum(dy (x - mean)) invstd^2 / n.
  std::vector<float> k(static_cast<size_t>(C)), a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  if (weight.defined()) dweight = empty_cpu(Shape{C});  // (C)
  if (has_bias) dbias = empty_cpu(Shape{C});            // (C)
  for (int64_t c = 0; c < C; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var.data<float>()[c]) + eps);
    k[i] = static_cast<float>((weight.defined() ? weight.data<float>()[c] : 1.0) * invstd);
    a[i] = global_stats ? 0.0f : static_cast<float>(sdy[i] / n);
    b[i] = global_stats ? 0.0f : static_cast<float>(sdyx[i] * invstd * invstd / n);
    if (weight.defined()) dweight.data<float>()[c] = static_cast<float>(sdyx[i] * invstd);
    if (has_bias) dbias.data<float>()[c] = static_cast<float>(sdy[i]);
  }
  dx = empty_cpu(x.shape(), DType::f32, x.layout());  // (N, C, H, W), x's layout, f32
  with_lanes(x, [&](auto lanes, const auto* px) {
    if (x.layout() == Layout::NHWC)
      affine_pass_nhwc<true>(s.count(), C, px, gy.data<float>(), dx.data<float>(), k.data(), a.data(), b.data(), m);
    else
      affine_pass<lanes.value, true>(s, px, gy.data<float>(), dx.data<float>(), k.data(), a.data(), b.data(), m);
  });
}

}  // namespace packrat::cpu
