#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace packrat {

LrSchedule::LrSchedule(LrScheduleConfig c) : c_(std::move(c)) {
  PACKRAT_CHECK(c_.kind == "constant" || c_.kind == "step" || c_.kind == "multistep" || c_.kind == "cosine",
                "lr schedule: unknown kind '{}' (known: constant, step, multistep, cosine)", c_.kind);
  PACKRAT_CHECK(c_.base_lr >= 0.0 && c_.min_lr >= 0.0 && c_.gamma > 0.0,
                "lr schedule: base_lr {}, min_lr {} must be >= 0 and gamma {} > 0", c_.base_lr, c_.min_lr, c_.gamma);
  PACKRAT_CHECK(c_.epochs > 0 && c_.steps_per_epoch > 0, "lr schedule: epochs {} and steps_per_epoch {} must be > 0",
                c_.epochs, c_.steps_per_epoch);
  PACKRAT_CHECK(c_.kind != "step" || c_.step_size > 0, "lr schedule: step_size must be > 0, got {}", c_.step_size);
  PACKRAT_CHECK(c_.warmup_epochs >= 0.0 && (c_.kind != "cosine" || c_.warmup_epochs < static_cast<double>(c_.epochs)),
                "lr schedule: warmup_epochs {} must be >= 0 and shorter than the run ({} epochs)", c_.warmup_epochs,
                c_.epochs);
}

double LrSchedule::lr(int64_t epoch, int64_t step_in_epoch) const {
  PACKRAT_CHECK(epoch >= 0 && step_in_epoch >= 0, "lr schedule: epoch {} and step {} must be >= 0", epoch,
                step_in_epoch);
  const double spe = static_cast<double>(c_.steps_per_epoch);
  const double global = static_cast<double>(epoch) * spe + static_cast<double>(step_in_epoch);
  const double warmup_steps = c_.warmup_epochs * spe;
  // Capped at 1: a warm-up shorter than one step (warmup_epochs * steps_per_epoch < 1) ends at
  // the first step instead of multiplying the learning rate.
  if (global < warmup_steps) return c_.base_lr * std::min(1.0, (global + 1.0) / warmup_steps);
  const double t = global / spe;  // fractional epoch
  if (c_.kind == "step") return c_.base_lr * std::pow(c_.gamma, std::floor(static_cast<double>(epoch) / c_.step_size));
  if (c_.kind == "multistep") {
    int passed = 0;
    for (int64_t m : c_.milestones) passed += epoch >= m;
    return c_.base_lr * std::pow(c_.gamma, passed);
  }
  if (c_.kind == "cosine") {
    const double span = static_cast<double>(c_.epochs) - c_.warmup_epochs;
    const double progress = std::min(1.0, (t - c_.warmup_epochs) / span);
    return c_.min_lr + (c_.base_lr - c_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return c_.base_lr;
}

}  // namespace packrat
