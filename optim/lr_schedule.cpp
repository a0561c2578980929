#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace packrat {

// Registration order is the order names are listed in messages ("constant, step, ...").
NamedRegistry<LrScheduleKind>& lr_schedules() {
  static NamedRegistry<LrScheduleKind> table([] {
    std::vector<std::pair<std::string, LrScheduleKind>> t;
    t.push_back({"constant", {{}, [](const LrScheduleConfig& c, int64_t, double) { return c.base_lr; }, nullptr}});
    t.push_back({"step",
                 {{"step_size", "gamma"},
                  [](const LrScheduleConfig& c, int64_t epoch, double) {
                    return c.base_lr * std::pow(c.gamma, std::floor(static_cast<double>(epoch) / c.step_size));
                  },
                  [](const LrScheduleConfig& c) {
                    PACKRAT_CHECK(c.step_size > 0, "lr schedule: step_size must be > 0, got {}", c.step_size);
                  }}});
    t.push_back({"multistep",
                 {{"milestones", "gamma"},
                  [](const LrScheduleConfig& c, int64_t epoch, double) {
                    int passed = 0;
                    for (int64_t m : c.milestones) passed += epoch >= m;
                    return c.base_lr * std::pow(c.gamma, passed);
                  },
                  nullptr}});
    t.push_back({"cosine",
                 {{"min_lr"},
                  [](const LrScheduleConfig& c, int64_t, double t) {
                    const double span = static_cast<double>(c.epochs) - c.warmup_epochs;
                    const double progress = std::min(1.0, (t - c.warmup_epochs) / span);
                    return c.min_lr + (c.base_lr - c.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
                  },
                  // The cosine runs over what is left after the warm-up: there must be some.
                  [](const LrScheduleConfig& c) {
                    PACKRAT_CHECK(c.warmup_epochs < static_cast<double>(c.epochs),
                                  "lr schedule: warmup_epochs {} must be >= 0 and shorter than the run ({} epochs)",
                                  c.warmup_epochs, c.epochs);
                  }}});
    return t;
  }());
  return table;
}

LrSchedule::LrSchedule(LrScheduleConfig c) : c_(std::move(c)) {
  const LrScheduleKind* kind = lr_schedules().find(c_.kind);
  if (kind == nullptr) fail("lr schedule: unknown kind '{}' (known: {})", c_.kind, lr_schedules().joined_names());
  kind_ = *kind;
  PACKRAT_CHECK(c_.base_lr >= 0.0 && c_.min_lr >= 0.0 && c_.gamma > 0.0,
                "lr schedule: base_lr {}, min_lr {} must be >= 0 and gamma {} > 0", c_.base_lr, c_.min_lr, c_.gamma);
  PACKRAT_CHECK(c_.epochs > 0 && c_.steps_per_epoch > 0, "lr schedule: epochs {} and steps_per_epoch {} must be > 0",
                c_.epochs, c_.steps_per_epoch);
  if (kind_.check) kind_.check(c_);
  PACKRAT_CHECK(c_.warmup_epochs >= 0.0, "lr schedule: warmup_epochs {} must be >= 0 and shorter than the run ({} epochs)",
                c_.warmup_epochs, c_.epochs);
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
  return kind_.lr(c_, epoch, global / spe);
}

}  // namespace packrat
