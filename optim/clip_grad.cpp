#include "optim/clip_grad.h"

#include <cmath>

#include "core/autograd_meta.h"
#include "core/parallel.h"

namespace packrat {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  PACKRAT_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  double total_sq = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    g.check_dtype(DType::f32, "clip_grad_norm");
    const float* d = g.data<float>();
    double s = 0.0;
    const int64_t n = g.numel();
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t k = 0; k < n; ++k) s += static_cast<double>(d[k]) * d[k];
    total_sq += s;
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  const float c = static_cast<float>(coef);
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // A scaled copy, not in place: a gradient buffer may be shared (add passes one through).
    Tensor scaled;
    {
      TagScope tag(MemTag::Gradient);
      scaled = Tensor::empty_like(g);
    }
    const float* s = g.data<float>();
    float* d = scaled.data<float>();
    parallel_chunks(g.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) d[k] = s[k] * c;
    });
    p.autograd_meta()->grad = scaled;
  }
  return total;
}

}  // namespace packrat
