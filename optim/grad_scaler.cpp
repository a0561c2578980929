#include "optim/grad_scaler.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/autograd_meta.h"
#include "core/backend.h"

namespace packrat {

GradScaler::GradScaler(GradScalerOptions o) : o_(o), scale_(o.init_scale) {
  PACKRAT_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale) && o.growth_factor > 1 && o.backoff_factor > 0 &&
                    o.backoff_factor < 1 && o.growth_interval >= 1,
                "GradScaler: init_scale {} must be positive, growth_factor {} "
                "above 1, backoff_factor {} in (0, 1), "
                "growth_interval {} at least 1",
                o.init_scale, o.growth_factor, o.backoff_factor, o.growth_interval);
}

Tensor GradScaler::scale_loss(const Tensor& loss) const { return ops::scale(loss, static_cast<float>(scale_)); }

bool GradScaler::unscale(const std::vector<Tensor>& params) const {
  bool finite = true;
  const double inverse = 1.0 / scale_;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // An inf or a NaN anywhere makes the sum of squares non-finite (one reduction a gradient).
    finite = finite && std::isfinite(backend_of(g).reduce_sum_squares(g));
    // A scaled copy, not in place: a gradient buffer may be shared (add passes one through).
    TagScope tag(MemTag::Gradient);
    p.autograd_meta()->grad = backend_of(g).scale(g, inverse);
  }
  return finite;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= o_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ == o_.growth_interval) {
    scale_ *= o_.growth_factor;
    growth_tracker_ = 0;
  }
}

void GradScaler::restore(double scale, int64_t growth_tracker, int64_t skipped) {
  PACKRAT_CHECK(
      scale > 0 && std::isfinite(scale) && growth_tracker >= 0 && growth_tracker < o_.growth_interval && skipped >= 0,
      "GradScaler: cannot restore scale {}, {} good steps in a row, "
      "{} skipped (scale must be positive and "
      "finite, good steps below the growth interval {})",
      scale, growth_tracker, skipped, o_.growth_interval);
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  skipped_ = skipped;
}

}  // namespace packrat
