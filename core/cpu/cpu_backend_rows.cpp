// CpuBackend: per-row primitives over the last dim: softmax, cross-entropy with label
// smoothing and ignore_index, layernorm. One row per OpenMP iteration (rows_for); exp is the
// vectorisable one of core/pointwise_math.h. Softmax and layernorm read and write f32 or bf16
// data (rows_read), computing in f32 on its values.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/half.h"
#include "core/pointwise_math.h"

namespace packrat::cpu {

bool CpuBackend::rows_read(DType dtype) const { return dtype == DType::f32 || dtype == DType::bf16; }

Tensor CpuBackend::softmax_forward(const Tensor& x_any, float scale, DType out) {
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  Tensor y = empty_cpu(x.shape(), out);  // (..., D)
  with_f32_or_bf16_data(x, "softmax", [&](const auto* src) {
    with_f32_or_bf16_data(y, "softmax", [&](auto* dst) {
      using Out = std::remove_pointer_t<decltype(dst)>;
      rows_for(rows, 3 * D, [&](int64_t r) {
        const auto* in = src + r * D;
        const auto at = [&](int64_t j) { return to_f32(in[j]) * scale; };  // exact when scale is 1
        float mx = at(0);
        for (int64_t j = 1; j < D; ++j) mx = std::max(mx, at(j));
        // The exponentials before the division: the output row itself, or f32 scratch for a
        // 16-bit output, which is rounded once, from the normalized value.
        thread_local std::vector<float> scratch;  // (D)
        float* e;
        if constexpr (std::is_same_v<Out, float>) {
          e = dst + r * D;
        } else {
          scratch.resize(static_cast<size_t>(D));
          e = scratch.data();
        }
        float sum = 0.0f;  // lane-wise partial sums (vectorised reduction)
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < D; ++j) {
          e[j] = pwmath::fast_exp(at(j) - mx);
          sum += e[j];
        }
        const float inv = 1.0f / sum;
        Out* o = dst + r * D;
        for (int64_t j = 0; j < D; ++j) o[j] = from_f32<Out>(e[j] * inv);
      });
    });
  });
  return y;
}

Tensor CpuBackend::softmax_backward(const Tensor& y_any, const Tensor& grad, float scale, DType out) {
  const Tensor yv = y_any.to_plain();
  const Tensor go = grad.to_plain();
  PACKRAT_CHECK(yv.shape() == go.shape(), "{} backward: gradient {} for output {}", op_where("softmax"),
                go.shape().str(), yv.shape().str());
  go.check_dtype(DType::f32, "softmax backward");
  const int64_t D = yv.dim(-1);
  Tensor gx = empty_cpu(yv.shape(), out);  // (..., D)
  const float* gp = go.data<float>();
  with_f32_or_bf16_data(yv, "softmax backward", [&](const auto* yp) {
    with_f32_or_bf16_data(gx, "softmax backward", [&](auto* dst) {
      using Out = std::remove_pointer_t<decltype(dst)>;
      rows_for(yv.numel() / D, 2 * D, [&](int64_t r) {
        const auto* yr = yp + r * D;
        const float* gr = gp + r * D;
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += static_cast<double>(gr[j]) * to_f32(yr[j]);
        const float d = static_cast<float>(dot);
        Out* o = dst + r * D;
        // Two products, each rounded, as softmax's gradient and then attention's scaling of it.
        for (int64_t j = 0; j < D; ++j) {
          const float dx = to_f32(yr[j]) * (gr[j] - d);
          o[j] = from_f32<Out>(dx * scale);
        }
      });
    });
  });
  return gx;
}

Backend::CrossEntropyOut CpuBackend::cross_entropy_forward(const Tensor& logits_any, const Tensor& targets,
                                                           float label_smoothing, bool want_probs,
                                                           int64_t ignore_index) {
  const std::string& layer = LayerScope::current();
  const int64_t N = logits_any.dim(0), C = logits_any.dim(1);
  const int64_t* t = targets.data<int64_t>();
  const auto ignored = [&](int64_t n) { return ignore_index != kNoIgnoreIndex && t[n] == ignore_index; };
  CrossEntropyOut res;
  for (int64_t i = 0; i < N; ++i) {
    if (ignored(i)) continue;
    PACKRAT_CHECK(t[i] >= 0 && t[i] < C, "cross_entropy {}: target {} of sample {} is out of range [0, {})", layer,
                  t[i], i, C);
    ++res.count;
  }
  const Tensor logits = logits_any.to_plain();
  const float* x = logits.data<float>();
  if (want_probs) res.probs = empty_cpu(Shape{N, C});  // (N, C)
  float* probs = want_probs ? res.probs.data<float>() : nullptr;
  std::vector<double> row_loss(static_cast<size_t>(N));  // (N); 0 for an ignored target
  const double eps = label_smoothing;
  rows_for(N, 4 * C, [&](int64_t n) {
    const float* r = x + n * C;
    float mx = r[0];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double sum = 0, sum_shifted = 0;  // sum exp(x - max), sum (x - max)
    for (int64_t c = 0; c < C; ++c) {
      const double s = static_cast<double>(r[c]) - mx;
      sum += std::exp(s);
      sum_shifted += s;
    }
    const double lse = std::log(sum);  // log p[c] = (x[c] - max) - lse
    if (!ignored(n)) {
      const double nll = lse - (static_cast<double>(r[t[n]]) - mx);
      const double smooth = lse - sum_shifted / static_cast<double>(C);  // mean_c(-log p[c])
      row_loss[static_cast<size_t>(n)] = (1.0 - eps) * nll + eps * smooth;
    }
    if (probs) {
      float* p = probs + n * C;
      for (int64_t c = 0; c < C; ++c) p[c] = static_cast<float>(std::exp(static_cast<double>(r[c]) - mx - lse));
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  res.loss = empty_cpu(Shape());  // scalar
  res.loss.data<float>()[0] = res.count > 0 ? static_cast<float>(total / static_cast<double>(res.count)) : 0.0f;
  return res;
}

Tensor CpuBackend::cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                          const Tensor& grad_loss, int64_t ignore_index, int64_t count) {
  const int64_t N = probs.dim(0), C = probs.dim(1);
  // count 0: every row is ignored, and no row reads gscale.
  const float gscale = grad_loss.to(DType::f32).data<float>()[0] / static_cast<float>(std::max<int64_t>(count, 1));
  const float off = label_smoothing / static_cast<float>(C), on = 1.0f - label_smoothing + off;
  Tensor gx = empty_cpu(Shape{N, C});  // (N, C)
  const float* pp = probs.data<float>();
  const int64_t* tp = targets.data<int64_t>();
  float* out = gx.data<float>();
  rows_for(N, C, [&](int64_t n) {
    if (ignore_index != kNoIgnoreIndex && tp[n] == ignore_index) {
      std::fill(out + n * C, out + (n + 1) * C, 0.0f);
      return;
    }
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = (pp[n * C + c] - off) * gscale;
    out[n * C + tp[n]] = (pp[n * C + tp[n]] - on) * gscale;
  });
  return gx;
}

Backend::LayerNormOut CpuBackend::layernorm_forward(const Tensor& x_any, const Tensor& weight, const Tensor& bias,
                                                    float eps) {
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  LayerNormOut res{empty_cpu(x.shape(), x.dtype()), empty_cpu(Shape{rows}), empty_cpu(Shape{rows})};  // (..., D), (R), (R)
  const float* wp = weight.defined() ? weight.data<float>() : nullptr;
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* mp = res.mean.data<float>();
  float* rp = res.rstd.data<float>();
  with_f32_or_bf16_data(x, "layernorm", [&](const auto* xp) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(xp)>>;
    T* yp = static_cast<T*>(res.y.raw());
    rows_for(rows, 3 * D, [&](int64_t r) {
      const T* xr = xp + r * D;
      double s = 0;
      for (int64_t j = 0; j < D; ++j) s += to_f32(xr[j]);
      const double m = s / static_cast<double>(D);
      double v = 0;
      for (int64_t j = 0; j < D; ++j) v += (to_f32(xr[j]) - m) * (to_f32(xr[j]) - m);
      const float rs = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(D) + eps));
      const float mf = static_cast<float>(m);
      mp[r] = mf;
      rp[r] = rs;
      T* yr = yp + r * D;
      for (int64_t j = 0; j < D; ++j) {
        float h = (to_f32(xr[j]) - mf) * rs;
        if (wp) h *= wp[j];
        if (bp) h += bp[j];
        yr[j] = from_f32<T>(h);
      }
    });
  });
  return res;
}

Backend::LayerNormGrads CpuBackend::layernorm_backward(const Tensor& x_any, const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, const Tensor& grad, bool want_dweight,
                                                       bool want_dbias) {
  const Tensor xs = x_any.to_plain();
  const Tensor go = grad.to_plain();
  go.check_dtype(DType::f32, "layernorm backward");
  const int64_t D = xs.dim(-1), R = xs.numel() / D;
  LayerNormGrads res;
  res.dx = empty_cpu(xs.shape());  // (..., D)
  const float *mp = mean.data<float>(), *rp = rstd.data<float>();
  const float* wp = weight.defined() ? weight.data<float>() : nullptr;
  const float* gp = go.data<float>();
  float* gxp = res.dx.data<float>();
  with_f32_or_bf16_data(xs, "layernorm backward", [&](const auto* xp) {
    rows_for(R, 3 * D, [&](int64_t r) {
      const auto* xr = xp + r * D;
      const float* gr = gp + r * D;
      double sum_gh = 0, sum_ghx = 0;
      for (int64_t j = 0; j < D; ++j) {
        const float gh = wp ? gr[j] * wp[j] : gr[j];
        const float xh = (to_f32(xr[j]) - mp[r]) * rp[r];
        sum_gh += gh;
        sum_ghx += static_cast<double>(gh) * xh;
      }
      const float a = static_cast<float>(sum_gh / D), b = static_cast<float>(sum_ghx / D);
      for (int64_t j = 0; j < D; ++j) {
        const float gh = wp ? gr[j] * wp[j] : gr[j];
        const float xh = (to_f32(xr[j]) - mp[r]) * rp[r];
        gxp[r * D + j] = rp[r] * (gh - a - xh * b);
      }
    });
    if (want_dweight || want_dbias) {
      std::vector<double> sw(static_cast<size_t>(D), 0.0), sb(static_cast<size_t>(D), 0.0);  // (D), (D)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < D; ++j) {
          const float gv = gp[r * D + j];
          sw[static_cast<size_t>(j)] += static_cast<double>(gv) * ((to_f32(xp[r * D + j]) - mp[r]) * rp[r]);
          sb[static_cast<size_t>(j)] += gv;
        }
      std::vector<float> fw(sw.begin(), sw.end()), fb(sb.begin(), sb.end());
      DeviceScope on_cpu(Device::cpu());
      if (want_dweight) res.dweight = Tensor::from_vector(Shape{D}, fw);
      if (want_dbias) res.dbias = Tensor::from_vector(Shape{D}, fb);
    }
  });
  return res;
}

}  // namespace packrat::cpu
