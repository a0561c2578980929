// Layer normalization over the last dimension: y = (x - mean) * rstd * weight + bias, with the
// biased variance and rstd = 1 / sqrt(var + eps), as PyTorch. Saves the input (Need::Value),
// the per-row mean and rstd (exact) and the weight (a parameter: never compressed).
// Backward, with xhat = (x - mean) * rstd and gh = g * weight:
//   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),  dweight = sum g * xhat,  dbias = sum g.
#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "autograd/ops/eltwise_common.h"
#include "core/parallel.h"

namespace packrat::ops {

namespace {

struct Rows {
  int64_t rows, D;
};

}  // namespace

Tensor layernorm(const Tensor& x_any, const Tensor& weight, const Tensor& bias, float eps) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x_any.defined(), "layernorm {}: the input is undefined", layer);
  PACKRAT_CHECK(x_any.dtype() == DType::f32 && x_any.rank() >= 1 && x_any.numel() > 0,
                "layernorm {}: expects a non-empty f32 input (..., D), got {} {}", layer, x_any.shape().str(),
                dtype_name(x_any.dtype()));
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      PACKRAT_CHECK(p->rank() == 1 && p->dim(0) == D && p->dtype() == DType::f32,
                    "layernorm {}: {} must be f32 of shape ({},) for input {}, got {} {}", layer,
                    p == &weight ? "weight" : "bias", D, x.shape().str(), p->shape().str(), dtype_name(p->dtype()));
  PACKRAT_CHECK(eps >= 0.0f, "layernorm {}: eps must be >= 0, got {}", layer, eps);

  Tensor y = Tensor::empty(x.shape());     // (..., D)
  Tensor mean = Tensor::empty(Shape{rows});  // (rows)
  Tensor rstd = Tensor::empty(Shape{rows});  // (rows)
  const float* xp = x.data<float>();
  const float* wp = weight.defined() ? weight.data<float>() : nullptr;
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  float* mp = mean.data<float>();
  float* rp = rstd.data<float>();
  detail::rows_for(rows, 3 * D, [&](int64_t r) {
    const float* xr = xp + r * D;
    double s = 0;
    for (int64_t j = 0; j < D; ++j) s += xr[j];
    const double m = s / static_cast<double>(D);
    double v = 0;
    for (int64_t j = 0; j < D; ++j) v += (xr[j] - m) * (xr[j] - m);
    const float rs = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(D) + eps));
    const float mf = static_cast<float>(m);
    mp[r] = mf;
    rp[r] = rs;
    float* yr = yp + r * D;
    for (int64_t j = 0; j < D; ++j) {
      float h = (xr[j] - mf) * rs;
      if (wp) h *= wp[j];
      if (bp) h += bp[j];
      yr[j] = h;
    }
  });

  if (needs_grad({&x_any, &weight, &bias})) {
    SaveRequest req;
    req.need = Need::Value;
    req.op = "layernorm";
    req.name = layer;
    SaveRequest stats = req;
    stats.exact = true;
    std::vector<SavedHandle> saved{save_for_backward(x, req), save_for_backward(mean, stats),
                                   save_for_backward(rstd, stats)};
    const bool has_w = weight.defined(), has_b = bias.defined();
    if (has_w) saved.push_back(save_for_backward(weight, req));
    const Layout x_layout = x_any.layout();
    const Rows shape{rows, D};
    record("layernorm", {&x_any, &weight, &bias}, {&y}, std::move(saved),
           [shape, has_w, has_b, x_layout](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const int64_t R = shape.rows, D = shape.D;
             const Tensor xs = n.load(0), ms = n.load(1), rs = n.load(2);
             const Tensor ws = has_w ? n.load(3) : Tensor();
             const Tensor go = g[0].to_plain();
             Tensor gx = Tensor::empty(xs.shape());  // (..., D)
             const float *xp = xs.data<float>(), *mp = ms.data<float>(), *rp = rs.data<float>();
             const float* wp = has_w ? ws.data<float>() : nullptr;
             const float* gp = go.data<float>();
             float* gxp = gx.data<float>();
             detail::rows_for(R, 3 * D, [&](int64_t r) {
               const float *xr = xp + r * D, *gr = gp + r * D;
               double sum_gh = 0, sum_ghx = 0;
               for (int64_t j = 0; j < D; ++j) {
                 const float gh = wp ? gr[j] * wp[j] : gr[j];
                 const float xh = (xr[j] - mp[r]) * rp[r];
                 sum_gh += gh;
                 sum_ghx += static_cast<double>(gh) * xh;
               }
               const float a = static_cast<float>(sum_gh / D), b = static_cast<float>(sum_ghx / D);
               for (int64_t j = 0; j < D; ++j) {
                 const float gh = wp ? gr[j] * wp[j] : gr[j];
                 const float xh = (xr[j] - mp[r]) * rp[r];
                 gxp[r * D + j] = rp[r] * (gh - a - xh * b);
               }
             });
             Tensor gw, gb;
             if (has_w || has_b) {
               std::vector<double> sw(static_cast<size_t>(D), 0.0), sb(static_cast<size_t>(D), 0.0);
               for (int64_t r = 0; r < R; ++r)
                 for (int64_t j = 0; j < D; ++j) {
                   const float gv = gp[r * D + j];
                   sw[static_cast<size_t>(j)] += static_cast<double>(gv) * ((xp[r * D + j] - mp[r]) * rp[r]);
                   sb[static_cast<size_t>(j)] += gv;
                 }
               std::vector<float> fw(sw.begin(), sw.end()), fb(sb.begin(), sb.end());
               if (has_w) gw = Tensor::from_vector(Shape{D}, fw);
               if (has_b) gb = Tensor::from_vector(Shape{D}, fb);
             }
             return {gx.to_layout(x_layout), gw, gb};
           });
  }
  return y;
}

}  // namespace packrat::ops
