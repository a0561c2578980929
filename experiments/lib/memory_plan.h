#pragma once
// memory.plan: auto — before training, pick the storage level that fits the batch in the budget
// at the best measured speed.
//
// The options are packrat's levels that the device and model can run: FP32 (L0), actnn-L2
// (4-bit), actnn-L3 (2-bit adaptive), gact-L1, every block recomputed, gact-CB1, gact-CB2 (a
// Transformer: memory-efficient attention too) and, on a GPU, gact-L2 and offloaded FP32. Each
// is profiled by two short benchmarks (trainer --benchmark's step: one warm-up, then timed steps)
// at b = batch / 4 and 2b; a step's peak grows linearly with the batch (activations, saved tensors
// and gradients of activations per sample, over parameters, optimizer state and workspace), so
// the two peaks predict the peak at data.batch_size. Among the options predicted to fit (within
// the prediction's 5%), the fastest at 2b (img/s) is checked by real steps at data.batch_size: if
// its measured peak is over the budget, or more than 5% from the prediction, that option's
// prediction becomes the measurement and the choice is made again (a re-plan). The options the
// profile's short runs cannot tell from it (within kRaceBand of its img/s), and L0 where it fits,
// are checked at the batch too, and the fastest measured there trains (the race). The plan is the
// configuration's saved_tensors, memory.recompute, memory.offload and model.attention replaced by
// the option's.
//
// Per segment: a level that is faster than every option that may fit but is over the budget
// itself is profiled again with the first k of the model's blocks recomputed (its residual or
// transformer blocks in forward order: a CNN's early blocks hold the most bytes for the same
// work), for the fewest k that fit (a binary search on k, every block tried first), and that
// option ("gact-L1+recompute 3/9") joins the choice. A level that stores without recomputing is
// also searched the other way: the stem and the first k blocks stored as the fastest storage
// level that fits, the rest kept as the level keeps them ("L0+actnn-L2 on 3/9"). And `recompute`
// (every block recomputed from its exact input), when it is the one over the budget, stores the
// stem and the inputs of its first k blocks as the fastest compressing storage level
// ("recompute+actnn-L2 on 3/24"). So each segment (stem and block) is kept, compressed or
// recomputed (from a kept or a compressed input), the choice measured, not modelled. Bits per
// tensor are GACT's own choice within a level; offload per tensor is not chosen yet.
//
// GACT's criterion bounds what compression may cost: before an option that compresses is
// checked, the gradient variance its storage adds (draws of its rounding noise on the first
// training batch, at a quarter of the batch) is measured against the gradient's sampling variance
// between the first training batches; over memory.max_variance_ratio (0.1, GACT's warning
// threshold) the option is not chosen (VarianceCheck).
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiments/lib/config.h"
#include "experiments/lib/gradient_fidelity.h"  // TrainingBatches
#include "experiments/lib/json.h"

namespace packrat {

struct PlanOption {
  std::string name;                    // "gact-L1"
  std::vector<std::string> overrides;  // "saved_tensors={default: ...}", applied as --set
  // A level's saved_tensors.default as the body of a scheme map ("scheme: actnn-L2"), so that a
  // rule can store part of the model as the level does; "" for an option made from others.
  std::string storage;
};

struct PlanMeasure {
  std::string option;
  std::string refused;           // why the device or model cannot run it ("" when it ran)
  int64_t small_batch = 0;       // b
  int64_t peak_small = 0, peak_double = 0;  // measured peaks at b and 2b
  double img_per_s = 0;          // at 2b
  int64_t predicted_peak = 0;    // at the target batch
  int64_t measured_peak = 0;     // at the target batch, for the options checked by a real step (0: not)
  double checked_img_per_s = 0;  // ... and that step's img/s (kCheckSteps timed steps)
  bool fits = false;             // its peak (measured where it was, else predicted) within the budget
  // The gradient variance its compression adds over the gradient's sampling variance (GACT's
  // criterion; measured for the compressing options the choice reached; NaN: not measured).
  double variance_ratio = std::numeric_limits<double>::quiet_NaN();
  bool too_noisy = false;        // variance_ratio over memory.max_variance_ratio: not chosen
};

struct MemoryPlan {
  int64_t budget = 0;
  int64_t batch = 0;             // data.batch_size
  std::string chosen;            // the option trained with
  std::vector<std::string> overrides;
  int64_t predicted_peak = 0;    // the chosen option's prediction before its check
  int64_t measured_peak = 0;     // ... its step's peak at the batch
  int replans = 0;               // checks whose peak was over the budget or off by more than 5%
  // The variance bound (memory.max_variance_ratio; 0: none), the gradient's sampling variance it
  // was measured against (NaN: never needed) and on what inputs ("training data", or "synthetic"
  // and why).
  double max_variance_ratio = 0, sampling_variance = std::numeric_limits<double>::quiet_NaN();
  std::string variance_inputs;
  std::vector<PlanMeasure> options;
  // {"budget", "batch", "chosen", "overrides", "predicted_peak", "measured_peak", "replans",
  //  "max_variance_ratio", "sampling_variance", "variance_inputs",
  //  "options": [{"option", "refused", "small_batch", "peak_small", "peak_double", "img_per_s",
  //  "predicted_peak", "measured_peak", "checked_img_per_s", "fits", "variance_ratio", "too_noisy"}]}
  Json json() const;
  std::string table() const;     // one line per option, for the console and the memory report
};

// The options for c's device and model, in the order above.
std::vector<PlanOption> plan_options(const Config& c);
// c with an option's overrides, memory.plan cleared (what trains, and the resolved config.yaml).
Config with_option(const Config& c, const std::vector<std::string>& overrides);
// Profiles the options and chooses (c.memory.plan == "auto"). Throws, naming the bytes, when no
// option fits: the smallest predicted peak, and what parameters, gradients and optimizer state
// alone take.
MemoryPlan plan_memory(const Config& c);
// The race at the batch. The profile ranks options by one short run at half the batch, whose
// img/s move by 10-30% between runs on a loaded machine, so near-ties are not decided there: once
// the fastest option predicted to fit (the leader) is checked within the budget, the next options
// whose profile img/s are at least kRaceBand of the leader's are checked at the batch as well (up
// to kRaceEntrants in all, the leader included), and the fastest of them measured there, within the
// budget and the variance bound, trains. A check is kCheckSteps timed steps after a warm-up.
inline constexpr double kRaceBand = 0.75;
inline constexpr size_t kRaceEntrants = 3;
inline constexpr int64_t kCheckSteps = 2;
// The options that may join the leader's race, fastest in the profile first: not refused, not
// checked yet, not over the variance bound, predicted within the budget's 5%, and at least
// kRaceBand of the leader's profile img/s. L0 (every tensor FP32, nothing recomputed), where it may
// fit, enters first whatever its profile's img/s: it adds no work to the step, so a profile that
// ranks it far below a compressing option is more likely a slow moment of the machine than the
// option's gain (the ViT's bf16 plan at 52 trained gact-L1 at 223 img/s where L0, never raced,
// had trained at 310), and its check is the cheapest. (How many run is plan_memory's:
// kRaceEntrants - 1 checks, an option found over the variance bound not counted.)
std::vector<size_t> race_entrants(const std::vector<PlanMeasure>& measured, size_t leader, int64_t budget);
// The winner: among the checked options within the budget and not over the variance bound (the
// leader always is), the fastest at the batch; the leader where they tie.
size_t race_winner(const std::vector<PlanMeasure>& measured, size_t leader);
// The segments of c's model: the modules `memory.recompute: [blocks]` marks, in forward order,
// and the modules before the first of them (a CNN's stem: conv1, bn1, act).
struct ModelBlocks {
  std::vector<std::string> stem;
  std::vector<std::string> blocks;
};
ModelBlocks model_blocks(const Config& c);
// `level` with the first k of `blocks` recomputed instead of its own memory.recompute.
PlanOption with_recomputed_blocks(const PlanOption& level, const std::vector<std::string>& blocks, size_t k);
// `level` (an option that stores, recomputing nothing) with the stem and the first k blocks
// stored as `storage` (a level, PlanOption::storage set): a saved_tensors rule on their layers.
// A `level` that recomputes every block instead stores the stem and the first k blocks' inputs
// (op checkpoint) as `storage`; what the blocks save while recomputed stays as the level keeps it.
PlanOption with_stored_blocks(const PlanOption& level, const PlanOption& storage, const ModelBlocks& m, size_t k);
// `level` (an option that stores, recomputing and offloading nothing) with what the stem and the
// first k blocks save moved to the host while the step runs (memory.offload on their layers; every
// saved tensor, the `offload` form, when k is every block): a device with a second memory's
// per-segment lever. The first blocks save first and are read last, so their copies have the
// whole step to move out and back.
PlanOption with_offloaded_blocks(const PlanOption& level, const ModelBlocks& m, size_t k);
// Whether plan_memory searches `level`, when it is over the budget and faster than what fits,
// with its fewest first blocks offloaded: a device with a second memory, a level that stores
// (recomputing and offloading nothing), not a preset that offloads every tensor itself (gact-L2).
bool offloads_segments(const Config& c, const PlanOption& level);
// The search for the fewest k in [1, n] whose option(k) has a predicted peak at
// c.data.batch_size that may fit c.memory.budget_bytes (option(k) holding fewer bytes as k
// grows): the profiles it ran, in order (an option among `known`, whose profiles are `measured`,
// is taken from there instead), and the option it found with its profile (none when even
// option(n) does not fit).
struct BlockSearch {
  std::vector<std::pair<PlanOption, PlanMeasure>> probes;
  std::optional<std::pair<PlanOption, PlanMeasure>> fewest;
};
BlockSearch fewest_blocks(const Config& c, size_t n, const std::function<PlanOption(size_t)>& option,
                          const std::vector<PlanOption>& known = {}, const std::vector<PlanMeasure>& measured = {});
// GACT's criterion for an option: the gradient variance its storage adds (kDraws draws of its
// rounding noise on the first training batch of `batch` samples) over the gradient's sampling
// variance between the first kBatches such batches, both in FP32 at initialisation. Built once
// per plan (the sampling variance), then asked per option. GACT's bits are allocated from the
// first kFirstEstimateBatch samples of the second batch, as the plan's check step and a benchmark
// allocate them (tools.h; its measured estimator runs one backward per saved tensor, at the
// batch's size), and serve the first, as a refresh's bits serve the batches after it.
// It holds no tensor between calls: the plan's peak checks run beside it.
class VarianceCheck {
 public:
  static constexpr int64_t kBatches = 8, kDraws = 4;
  VarianceCheck(const Config& c, int64_t batch);
  // NaN for an option that keeps every saved tensor exact (FP32, recomputation alone).
  double ratio(const PlanOption& o) const;
  double sampling_variance() const { return sampling_; }
  const std::string& inputs() const { return inputs_; }  // "training data", or "synthetic (why)"

 private:
  TrainingBatches batches(int64_t count) const;  // the first `count`, from the data or synthetic
  Config config_;
  int64_t batch_ = 0;
  bool synthetic_ = false;
  double sampling_ = 0;
  std::string inputs_;
};

// --find-max-batch under plan: auto: every option's largest batch under `limit`; the plan is the
// option with the largest (the first in plan_options' order where several tie), confirmed by the
// check plan_memory runs at that batch (lowered until that check's peak is within `limit`, so
// that the plan trains at the batch it found). An option over memory.max_variance_ratio
// (measured at a quarter of data.batch_size) is left out (batch -1).
struct PlannedMaxBatch {
  std::string chosen;
  int64_t batch_size = 0, peak_bytes = 0;  // peak_bytes: the check's at batch_size
  std::vector<std::pair<std::string, int64_t>> per_option;  // (option, its largest batch; -1 refused)
};
PlannedMaxBatch plan_max_batch(const Config& c, int64_t limit);
// The confirmation: among the options' largest batches (`batches`, -1 or 0: none), the largest
// (the first where several tie) whose check, checked(option, batch) -> peak bytes, is within
// `limit`; one over it is lowered by its excess over the bytes a sample takes at most (its peak
// over its batch) and checked again, and may fall below another option's, checked in turn.
// `batches` keeps the lowered values; none when every option falls to 0.
struct ConfirmedBatch {
  size_t option = 0;
  int64_t batch = 0, peak = 0;
};
std::optional<ConfirmedBatch> confirm_largest(std::vector<int64_t>& batches, int64_t limit,
                                              const std::function<int64_t(size_t, int64_t)>& checked);

}  // namespace packrat
