#pragma once
// Learning-rate schedules as a function of (epoch, step in epoch): constant, step decay
// (x gamma every step_size epochs), multistep (x gamma at each milestone epoch) or cosine
// (from the base lr down to min_lr over the run), optionally after a linear warmup.
//
// Time is t = epoch + step / steps_per_epoch (fractional epochs), so the cosine and the warmup
// move every step; step and multistep decay change at epoch boundaries.
// Warmup: for the first warmup_epochs, lr = base * min(1, (g + 1) / warmup_steps) with g the
// global step index (never 0, never above base, also when the warm-up is shorter than a step);
// the main schedule then runs on the remaining time (cosine over [warmup, epochs];
// step/multistep keep their absolute epochs).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/named_registry.h"
namespace packrat {

struct LrScheduleConfig {
  std::string kind = "constant";  // constant | step | multistep | cosine
  double base_lr = 0.1;
  int64_t epochs = 1;             // length of the run (cosine)
  int64_t steps_per_epoch = 1;
  int64_t step_size = 30;         // step: epochs between decays
  std::vector<int64_t> milestones;  // multistep: epochs at which to decay
  double gamma = 0.1;             // step / multistep factor
  double min_lr = 0.0;            // cosine floor
  double warmup_epochs = 0.0;     // linear warmup length (may be fractional)
};

// Schedules by name, as saved-tensor schemes are (quant/policy/rule_policy.h): constant, step,
// multistep and cosine are registered on first use; a program may add its own before it runs the
// trainer. The config's schedule.name is one of these names.
struct LrScheduleKind {
  // The LrScheduleConfig fields (= the config's schedule.* keys) this kind reads besides the
  // ones every kind reads (base_lr, epochs, steps_per_epoch, warmup_epochs); the config refuses the
  // others' keys for it.
  std::vector<std::string> keys;
  // The lr at global step `global` (t = global / steps_per_epoch: the fractional epoch) after
  // the warm-up.
  std::function<double(const LrScheduleConfig& c, int64_t epoch, double t)> lr;
  // Throws for numbers this kind cannot run with (the common ones are checked for every kind).
  std::function<void(const LrScheduleConfig& c)> check;
};
// The LR schedules by name, in registration order (lr_schedules().add(name, kind); .names();
// .find(name), nullptr when unknown).
NamedRegistry<LrScheduleKind>& lr_schedules();

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleConfig c);  // throws on an unknown kind or bad numbers
  double lr(int64_t epoch, int64_t step_in_epoch) const;
  const LrScheduleConfig& config() const { return c_; }

 private:
  LrScheduleConfig c_;
  LrScheduleKind kind_;
};

}  // namespace packrat
