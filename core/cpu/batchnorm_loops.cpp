// Batch normalization as OpenMP loops over the buffer as it lies (plain or nChw16c): one pass
// for the per-channel sums (threads split the channels, so no cross-thread reduction and no
// barrier inside a pass), one pass for the elementwise part. Accumulation is in double.
#include <cmath>

#include "core/cpu/batchnorm.h"
#include "core/cpu/dnnl_context.h"
#include "core/parallel.h"

namespace packrat::cpu {

namespace {

// A 4-d buffer seen as N x U slabs of HW x L floats, where slab (n, u) holds channels
// [u * L, (u + 1) * L): L = 16 for nChw16c (lanes interleaved), L = 1 for plain.
struct Slabs {
  int64_t N, U, HW;
  int64_t count() const { return N * HW; }  // values per channel
};

template <int L>
void channel_sums(const float* x, const float* y, const Slabs& s, const float* center, double* sum_out,
                  double* sum2_out) {
  // sum_out[c] = sum of x; sum2_out[c] = sum of x * x (y == nullptr) or of y * (x - center[c]).
  parallel_for(0, s.U, [&](int64_t u) {
    double a[L] = {}, b[L] = {};
    float m[L] = {};
    if (center)
      for (int l = 0; l < L; ++l) m[l] = center[u * L + l];
    for (int64_t n = 0; n < s.N; ++n) {
      const int64_t base = (n * s.U + u) * s.HW * L;
      const float* px = x + base;
      const float* py = y ? y + base : nullptr;
      for (int64_t i = 0; i < s.HW; ++i)
        for (int l = 0; l < L; ++l) {
          const double v = px[i * L + l];
          if (py) {
            const double g = py[i * L + l];
            a[l] += g;
            b[l] += g * (v - m[l]);
          } else {
            a[l] += v;
            b[l] += v * v;
          }
        }
    }
    for (int l = 0; l < L; ++l) {
      sum_out[u * L + l] = a[l];
      sum2_out[u * L + l] = b[l];
    }
  });
}

// out = (x - center[c]) * k[c] + add[c] (+ (g - ...) forms via the lambda): elementwise per channel.
template <int L, typename Fn>
void per_channel(const Slabs& s, Fn&& fn) {
  parallel_for(0, s.N * s.U, [&](int64_t nu) {
    const int64_t u = nu % s.U, base = nu * s.HW * L;
    for (int64_t i = 0; i < s.HW; ++i)
      for (int l = 0; l < L; ++l) fn(base + i * L + l, u * L + l);
  });
}

Slabs slabs_of(const Tensor& x) {
  const bool blocked = x.layout() == Layout::nChw16c;
  return Slabs{x.dim(0), blocked ? x.dim(1) / kChannelBlock : x.dim(1), x.dim(2) * x.dim(3)};
}

template <int L>
void normalize(const Tensor& x, Tensor& y, const std::vector<float>& scale, const std::vector<float>& shift) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const float *k = scale.data(), *a = shift.data();
  per_channel<L>(slabs_of(x), [&](int64_t i, int64_t c) { py[i] = px[i] * k[c] + a[c]; });
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
  if (x.layout() == Layout::nChw16c) normalize<16>(x, y, scale, shift);
  else normalize<1>(x, y, scale, shift);
}

}  // namespace

void batchnorm_forward_training_loops(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                      Tensor& mean, Tensor& var) {
  const int64_t C = x.dim(1);
  const Slabs s = slabs_of(x);
  std::vector<double> sum(static_cast<size_t>(C)), sum2(static_cast<size_t>(C));
  if (x.layout() == Layout::nChw16c) channel_sums<16>(x.data<float>(), nullptr, s, nullptr, sum.data(), sum2.data());
  else channel_sums<1>(x.data<float>(), nullptr, s, nullptr, sum.data(), sum2.data());
  mean = Tensor::empty(Shape{C});  // (C)
  var = Tensor::empty(Shape{C});   // (C), biased
  const double n = static_cast<double>(s.count());
  for (int64_t c = 0; c < C; ++c) {
    const double m = sum[static_cast<size_t>(c)] / n;
    mean.data<float>()[c] = static_cast<float>(m);
    var.data<float>()[c] = static_cast<float>(std::max(0.0, sum2[static_cast<size_t>(c)] / n - m * m));
  }
  y = Tensor::empty_like(x);  // (N, C, H, W), x's layout
  normalize_any(x, y, weight, bias, mean.data<float>(), var.data<float>(), eps);
}

Tensor batchnorm_forward_inference_loops(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& mean, const Tensor& var, float eps) {
  Tensor y = Tensor::empty_like(x);  // (N, C, H, W), x's layout
  normalize_any(x, y, weight, bias, mean.data<float>(), var.data<float>(), eps);
  return y;
}

void batchnorm_backward_loops(const Tensor& x, const Tensor& gy_any, const Tensor& weight, bool has_bias,
                              const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                              Tensor& dweight, Tensor& dbias) {
  const int64_t C = x.dim(1);
  const Slabs s = slabs_of(x);
  const Tensor gy = to_layout(gy_any, x.layout());
  const bool blocked = x.layout() == Layout::nChw16c;
  const float* m = mean.data<float>();
  std::vector<double> sdy(static_cast<size_t>(C)), sdyx(static_cast<size_t>(C));  // sum dy, sum dy * (x - mean)
  if (blocked) channel_sums<16>(x.data<float>(), gy.data<float>(), s, m, sdy.data(), sdyx.data());
  else channel_sums<1>(x.data<float>(), gy.data<float>(), s, m, sdy.data(), sdyx.data());
  const double n = static_cast<double>(s.count());
  // dx = k (dy - a - (x - mean) b): k = w invstd; training: a = sum dy / n, b = sum(dy (x - mean)) invstd^2 / n.
  std::vector<float> k(static_cast<size_t>(C)), a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  if (weight.defined()) dweight = Tensor::empty(Shape{C});  // (C)
  if (has_bias) dbias = Tensor::empty(Shape{C});            // (C)
  for (int64_t c = 0; c < C; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var.data<float>()[c]) + eps);
    k[i] = static_cast<float>((weight.defined() ? weight.data<float>()[c] : 1.0) * invstd);
    a[i] = global_stats ? 0.0f : static_cast<float>(sdy[i] / n);
    b[i] = global_stats ? 0.0f : static_cast<float>(sdyx[i] * invstd * invstd / n);
    if (weight.defined()) dweight.data<float>()[c] = static_cast<float>(sdyx[i] * invstd);
    if (has_bias) dbias.data<float>()[c] = static_cast<float>(sdy[i]);
  }
  dx = Tensor::empty_like(x);  // (N, C, H, W), x's layout
  const float *px = x.data<float>(), *pg = gy.data<float>();
  float* pd = dx.data<float>();
  auto fn = [&](int64_t e, int64_t c) { pd[e] = k[c] * (pg[e] - a[c] - (px[e] - m[c]) * b[c]); };
  if (blocked) per_channel<16>(s, fn);
  else per_channel<1>(s, fn);
}

}  // namespace packrat::cpu
