#include "optim/clip_grad.h"

#include <cmath>

#include "core/autograd_meta.h"
#include "core/backend.h"

namespace packrat {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  PACKRAT_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  double total_sq = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    g.check_dtype(DType::f32, "clip_grad_norm");
    total_sq += backend_of(g).reduce_sum_squares(g);
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // A scaled copy, not in place: a gradient buffer may be shared (add passes one through).
    TagScope tag(MemTag::Gradient);
    p.autograd_meta()->grad = backend_of(g).scale(g, coef);
  }
  return total;
}

}  // namespace packrat
