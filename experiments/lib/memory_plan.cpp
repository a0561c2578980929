#include "experiments/lib/memory_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/error.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/tools.h"
#include "layers/conv2d.h"
#include "models/registry.h"
#include "quant/policy/presets.h"
#include "quant/policy/rule_policy.h"

namespace packrat {

namespace {

// A Transformer's config reads model.attention: gact-CB2 (memory-efficient attention) applies.
bool has_attention(const Config& c) {
  const auto& keys = model_keys(c.model.arch);
  return std::find(keys.begin(), keys.end(), "attention") != keys.end();
}

// Whether one of the overrides sets the key `prefix` begins ("memory.offload=").
bool has_override(const std::vector<std::string>& overrides, std::string_view prefix) {
  return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& s) { return s.starts_with(prefix); });
}

// A level: every saved tensor stored as `storage` (the body of a scheme map), every block
// recomputed or none, and the level's other settings.
PlanOption level(std::string name, std::string storage, bool recompute, std::vector<std::string> more = {}) {
  PlanOption o{std::move(name), {"saved_tensors={default: {" + storage + "}, rules: []}",
                                 recompute ? "memory.recompute=[blocks]" : "memory.recompute=[]"}, storage};
  o.overrides.insert(o.overrides.end(), more.begin(), more.end());
  return o;
}

// L0: every saved tensor FP32, nothing recomputed (plan_options' first).
PlanOption fp32_level() { return level("L0", "scheme: fp32", false); }

constexpr double kRecheckTolerance = 0.05;  // a prediction further off than this is re-planned

// Whether an option's prediction is within its 5% of the budget (at a largest batch the peak lies
// just under the budget, where a prediction 1% high would otherwise rule the option out).
bool predicted_within(int64_t predicted_peak, int64_t budget) {
  return static_cast<double>(predicted_peak) <= static_cast<double>(budget) * (1 + kRecheckTolerance);
}

// Parameters, their gradients and the optimizer's state after one step at batch 1: what every
// option holds whatever the batch.
struct Resident {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
};
Resident resident_bytes(const Config& c) {
  apply_process_settings(c);
  const RunDevice on(c);
  const InputSpec in = synthetic_input_spec(c);
  Session s = make_session(c, in);
  SyntheticBatch b = synthetic_inputs(c, in, 1);
  Allocator& a = Allocator::of(on.device());
  a.reset_peak();
  StepOptions o;
  train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, o);
  // Gradients live from the backward to the update: their peak.
  Resident r{a.current(MemTag::Parameter), a.peak(MemTag::Gradient), a.current(MemTag::OptimizerState)};
  clear_tape();
  return r;
}

// One option's profile: peaks at b and 2b, img/s at 2b, and the linear prediction at `batch`.
PlanMeasure profile(const Config& c, const PlanOption& o, int64_t batch) {
  PlanMeasure m;
  m.option = o.name;
  Config oc;
  try {
    // GACT's bits as training allocates them: every tensor estimated on kFirstEstimateBatch samples
    // before the timed steps (benchmark), so the peaks are training's and the check's.
    oc = with_option(c, o.overrides);
  } catch (const Error& e) {
    m.refused = e.what();
    return m;
  }
  // b = batch / 4 and 2b = batch / 2: close enough to the batch that the line through them holds
  // (at 8 and 16 the quickstart's 2-bit peak at 128 came out 16% low: the fixed part is not fixed
  // at tiny batches), cheap enough to profile every option.
  m.small_batch = std::max<int64_t>(1, batch / 4);
  auto at = [&](int64_t n, int64_t steps) {
    Config b = oc;
    b.data.batch_size = n;
    return benchmark(b, steps);
  };
  try {
    const BenchmarkResult small = at(m.small_batch, 1), twice = at(2 * m.small_batch, 2);
    m.peak_small = small.peak_bytes;
    m.peak_double = twice.peak_bytes;
    m.img_per_s = twice.img_per_s;
  } catch (const Error& e) {
    m.refused = e.what();
    return m;
  }
  const double per_sample = static_cast<double>(m.peak_double - m.peak_small) / static_cast<double>(m.small_batch);
  m.predicted_peak = m.peak_small + static_cast<int64_t>(std::llround(per_sample * static_cast<double>(batch - m.small_batch)));
  m.fits = m.predicted_peak <= c.memory.budget_bytes;
  return m;
}

bool recomputes(const PlanOption& o) {
  return std::none_of(o.overrides.begin(), o.overrides.end(),
                      [](const std::string& s) { return s == "memory.recompute=[]"; });
}

bool recomputes_every_block(const PlanOption& o) {
  return std::any_of(o.overrides.begin(), o.overrides.end(),
                     [](const std::string& s) { return s == "memory.recompute=[blocks]"; });
}

// An option that stores every saved tensor as one level does, recomputing and offloading nothing.
bool stores_only(const PlanOption& o) {
  return !o.storage.empty() && !recomputes(o) && !has_override(o.overrides, "memory.offload=");
}

// The check of an option at c's batch: the peak of kCheckSteps steps as it trains (every tensor's
// GACT bits from kFirstEstimateBatch samples, as a benchmark allocates them), after a warm-up
// step, and their img/s. plan_memory's checks and plan_max_batch's confirmation are this one.
BenchmarkResult checked_step(const Config& c, const PlanOption& o) {
  return benchmark(with_option(c, o.overrides), kCheckSteps);
}

// Whether one of c's model's convolutions is one oneDNN may run as Winograd under conv_algorithm
// auto (3x3, stride 1, no dilation, not grouped). Where none is (a ViT's patch embedding), the
// "+direct" options run the same kernels as the levels: they would only double the profile, and
// let the noise of its short benchmarks choose between twins.
bool may_use_winograd(const Config& c) {
  // The model alone: the config's storage rules name its layers, which the options replace.
  const Config m = with_option(c, {"saved_tensors={default: fp32, rules: []}", "memory.recompute=[]"});
  apply_process_settings(m);
  const RunDevice on(m);
  Session s = make_session(m, synthetic_input_spec(m));
  for (const auto& [name, module] : s.model->named_modules()) {
    const auto* conv = dynamic_cast<const Conv2d*>(module);
    if (conv && conv->kernel() == 3 && conv->config().stride == 1 && conv->config().dilation == 1 &&
        conv->config().groups == 1)
      return true;
  }
  return false;
}

// Whether an option may fit: checked and within the budget, or predicted within the prediction's
// 5% of it; and not over the variance bound.
bool may_fit(const PlanMeasure& m, int64_t budget) {
  return !m.too_noisy && (m.measured_peak > 0 ? m.fits : predicted_within(m.predicted_peak, budget));
}

// The fastest option that may fit so far (img/s; 0 when none does).
double fastest_fitting(const std::vector<PlanMeasure>& measured, int64_t budget) {
  double best = 0;
  for (const PlanMeasure& m : measured)
    if (m.refused.empty() && predicted_within(m.predicted_peak, budget)) best = std::max(best, m.img_per_s);
  return best;
}

}  // namespace

ModelBlocks model_blocks(const Config& c) {
  apply_process_settings(c);
  const RunDevice on(c);
  const Config b = with_option(c, {"memory.recompute=[]"});
  Session s = make_session(b, synthetic_input_spec(b));
  ModelBlocks m;  // blocks: the outermost, what `memory.recompute: [blocks]` marks
  for (const auto& [name, module] : s.model->named_modules()) {
    const bool inside = std::any_of(m.blocks.begin(), m.blocks.end(),
                                    [&](const std::string& outer) { return name.starts_with(outer + "."); });
    if (module->is_block() && !inside)
      m.blocks.push_back(name);
    else if (m.blocks.empty() && !name.empty())
      m.stem.push_back(name);
  }
  // A container of the blocks ("layer1") comes before its first block, and is not the stem.
  std::erase_if(m.stem, [&](const std::string& s) {
    return std::any_of(m.blocks.begin(), m.blocks.end(), [&](const std::string& b) { return b.starts_with(s + "."); });
  });
  return m;
}

PlanOption with_recomputed_blocks(const PlanOption& level, const std::vector<std::string>& blocks, size_t k) {
  PACKRAT_CHECK(k >= 1 && k <= blocks.size(), "with_recomputed_blocks: {} of {} blocks", k, blocks.size());
  PlanOption o;
  o.name = fmt::format("{}+recompute {}/{}", level.name, k, blocks.size());
  for (const std::string& s : level.overrides)
    if (s.rfind("memory.recompute=", 0) != 0) o.overrides.push_back(s);
  std::string list;
  for (size_t i = 0; i < k; ++i) list += fmt::format("{}\"{}\"", i ? ", " : "", blocks[i]);
  // Every block as the levels say it, so that the option is recognised as one (L0's is `recompute`).
  o.overrides.push_back(k == blocks.size() ? "memory.recompute=[blocks]" : "memory.recompute=[" + list + "]");
  return o;
}

namespace {
// Names as the items of a YAML flow list, each with `suffix`: "conv1", "bn1", "layer1.0.*".
std::string quoted(const std::vector<std::string>& names, const char* suffix) {
  std::string list;
  for (const std::string& s : names) list += fmt::format("{}\"{}{}\"", list.empty() ? "" : ", ", s, suffix);
  return list;
}

// The layers of the segment "the stem and the first k blocks": the stem's modules by name, each
// block's by its prefix.
std::string stem_and_first_blocks(const ModelBlocks& m, size_t k) {
  const std::vector<std::string> first(m.blocks.begin(), m.blocks.begin() + static_cast<std::ptrdiff_t>(k));
  const std::string stem = quoted(m.stem, ""), blocks = quoted(first, ".*");
  return stem.empty() ? blocks : stem + ", " + blocks;
}
}  // namespace

PlanOption with_stored_blocks(const PlanOption& level, const PlanOption& storage, const ModelBlocks& m, size_t k) {
  const bool recomputed =
      recomputes_every_block(level) && !level.storage.empty() && !has_override(level.overrides, "memory.offload=");
  PACKRAT_CHECK(k >= 1 && k <= m.blocks.size() && (stores_only(level) || recomputed) && stores_only(storage),
                "with_stored_blocks: {} of {} blocks of {} stored as {}", k, m.blocks.size(), level.name, storage.name);
  PlanOption o;
  // "L0+direct" with actnn-L2+direct's storage: "L0+direct+actnn-L2 on 3/9".
  const std::string base = storage.name.substr(0, storage.name.find('+'));
  o.name = fmt::format("{}+{} on {}/{}", level.name, base, k, m.blocks.size());
  std::vector<std::string> rules;
  if (!recomputed) {
    rules.push_back(fmt::format("{{layers: [{}], {}}}", stem_and_first_blocks(m, k), storage.storage));
  } else {  // the stem's tensors, which the backward holds throughout, and the blocks' inputs
    const std::vector<std::string> first(m.blocks.begin(), m.blocks.begin() + static_cast<std::ptrdiff_t>(k));
    if (!m.stem.empty()) rules.push_back(fmt::format("{{layers: [{}], {}}}", quoted(m.stem, ""), storage.storage));
    rules.push_back(fmt::format("{{layers: [{}], ops: [checkpoint], {}}}", quoted(first, ""), storage.storage));
  }
  for (const std::string& s : level.overrides)
    if (s.rfind("saved_tensors=", 0) != 0) o.overrides.push_back(s);
  std::string list;
  for (const std::string& r : rules) list += (list.empty() ? "" : ", ") + r;
  o.overrides.push_back(fmt::format("saved_tensors={{default: {{{}}}, rules: [{}]}}", level.storage, list));
  return o;
}

PlanOption with_offloaded_blocks(const PlanOption& level, const ModelBlocks& m, size_t k) {
  PACKRAT_CHECK(k >= 1 && k <= m.blocks.size() && stores_only(level), "with_offloaded_blocks: {} of {} blocks of {}", k,
                m.blocks.size(), level.name);
  PlanOption o;
  o.name = fmt::format("{}+offload {}/{}", level.name, k, m.blocks.size());
  o.overrides = level.overrides;
  // Every block as the `offload` level says it (L0's is that level, not profiled twice).
  o.overrides.push_back(k == m.blocks.size() ? "memory.offload={}"
                                             : fmt::format("memory.offload={{layers: [{}]}}", stem_and_first_blocks(m, k)));
  return o;
}

bool offloads_segments(const Config& c, const PlanOption& level) {
  return !Device::parse(c.device).is_cpu() && stores_only(level) &&
         !preset_offloads(with_option(c, level.overrides).saved_tensors.default_scheme.scheme);
}

bool same_option(const PlanOption& a, const PlanOption& b) {
  std::vector<std::string> x = a.overrides, y = b.overrides;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  return x == y;
}

BlockSearch fewest_blocks(const Config& c, size_t n, const std::function<PlanOption(size_t)>& option,
                          const std::vector<PlanOption>& known, const std::vector<PlanMeasure>& measured) {
  PACKRAT_CHECK(known.size() == measured.size(), "fewest_blocks: {} options, {} profiles", known.size(), measured.size());
  BlockSearch r;
  auto fits = [&](const PlanMeasure& m) { return m.refused.empty() && predicted_within(m.predicted_peak, c.memory.budget_bytes); };
  // All n first: when even that does not fit, no fewer will.
  size_t lo = 1, hi = n;
  while (lo <= hi) {
    const size_t k = r.fewest ? lo + (hi - lo) / 2 : hi;
    PlanOption o = option(k);
    // An option profiled already (L0 with every block recomputed is `recompute`) is not run again.
    const auto same = std::find_if(known.begin(), known.end(), [&](const PlanOption& p) { return same_option(p, o); });
    PlanMeasure m;
    if (same != known.end()) {
      o = *same;
      m = measured[static_cast<size_t>(same - known.begin())];
    } else {
      m = profile(c, o, c.data.batch_size);
      spdlog::info("plan: {} predicts a peak of {} at batch {}, {:.1f} img/s", o.name, format_bytes(m.predicted_peak),
                   c.data.batch_size, m.img_per_s);
      r.probes.emplace_back(o, m);
    }
    if (fits(m)) {
      r.fewest.emplace(std::move(o), std::move(m));
      if (k == lo) break;
      hi = k - 1;
    } else {
      if (!r.fewest) break;  // all n did not fit
      lo = k + 1;
    }
  }
  return r;
}

std::vector<PlanOption> plan_options(const Config& c) {
  std::vector<PlanOption> o = {
      fp32_level(),
      level("actnn-L2", "scheme: actnn-L2", false),
      level("actnn-L3", "scheme: actnn-L3", false),
      level("gact-L1", "scheme: gact-L1", false),
      level("recompute", "scheme: fp32", true),
      level("gact-CB1", "scheme: gact-CB1", true),
  };
  if (has_attention(c)) o.push_back(level("gact-CB2", "scheme: gact-CB2", true, {"model.attention=memory_efficient"}));
  if (!Device::parse(c.device).is_cpu()) {  // a second memory to offload to
    o.push_back(level("gact-L2", "scheme: gact-L2", false));
    o.push_back(level("offload", "scheme: fp32", false, {"memory.offload={}"}));
  }
  // The convolution kernels are a lever too: under conv_algorithm auto oneDNN may pick Winograd,
  // whose Workspace depends on the CPU (the quickstart's 2-bit step at batch 128: 69.4 MiB on an
  // Intel Xeon with AMX, 33.6 MiB of it Workspace; 43.7 MiB with direct kernels, as on an AMD EPYC
  // Zen 4). Each level again with direct convolutions, for an image model on the CPU whose
  // convolutions Winograd may take.
  const bool images = c.data.dataset != "text" && c.data.dataset != "text_classes";
  if (Device::parse(c.device).is_cpu() && c.conv_algorithm == "auto" && images && may_use_winograd(c)) {
    const size_t levels = o.size();
    for (size_t i = 0; i < levels; ++i) {
      PlanOption direct = o[i];
      direct.name += "+direct";
      direct.overrides.push_back("conv_algorithm=direct");
      o.push_back(std::move(direct));
    }
  }
  return o;
}

Config with_option(const Config& c, const std::vector<std::string>& overrides) {
  Config out = parse_config(config_to_yaml(c), c.source, overrides);
  out.memory.plan.clear();
  // An offload rule of the user's would ride along with every option: only the option's stays.
  if (!has_override(overrides, "memory.offload=")) out.memory.offload.reset();
  out.source = c.source;
  return out;
}

VarianceCheck::VarianceCheck(const Config& c, int64_t batch) : config_(c), batch_(batch) {
  apply_process_settings(c);
  const RunDevice on(c);
  TrainingBatches data;
  try {
    data = training_batches(c, batch, kBatches, "memory.plan");
    inputs_ = "training data";
  } catch (const Error& e) {  // no data here (a dataset not installed): the profile's synthetic inputs
    synthetic_ = true;
    inputs_ = fmt::format("synthetic ({})", e.what());
    data = batches(kBatches);
  }
  const Config fp32 = with_option(c, fp32_level().overrides);  // L0, without plan_options' model build
  Session s = make_session(fp32, data.input);
  sampling_ = gradient_sampling_variance(*s.model, *s.policy, data.batches, c.train.label_smoothing);
  clear_tape();
}

TrainingBatches VarianceCheck::batches(int64_t count) const {
  if (!synthetic_) return training_batches(config_, batch_, count, "memory.plan");
  TrainingBatches data;
  data.input = synthetic_input_spec(config_);
  for (int64_t i = 0; i < count; ++i) {
    SyntheticBatch b = synthetic_inputs(config_, data.input, batch_, static_cast<uint64_t>(i));
    data.batches.push_back({b.images, b.labels});
  }
  return data;
}

double VarianceCheck::ratio(const PlanOption& o) const {
  const Config oc = with_option(config_, o.overrides);
  if (keeps_every_tensor_exact(oc.saved_tensors)) return std::numeric_limits<double>::quiet_NaN();
  apply_process_settings(oc);
  const RunDevice on(oc);
  const TrainingBatches data = batches(2);
  Session s = make_session(oc, data.input);
  StorePolicySpec fp32;
  fp32.seed = oc.seed;
  RulePolicy reference(fp32);
  // GACT's bits from the second batch's first samples, the noise drawn on the first: in training
  // the bits a refresh allocates serve the batches after it.
  const LabelledBatch& b = data.batches[0];
  const LabelledBatch& other = data.batches[1];
  const int64_t few = std::min<int64_t>(kFirstEstimateBatch, other.images.shape()[0]);
  const LabelledBatch estimate{ops::narrow(other.images, 0, 0, few), ops::narrow(other.labels, 0, 0, few)};
  const FidelityReport r = measure_gradient_fidelity(*s.model, reference, *s.policy, b.images, b.labels, kDraws, 0,
                                                     oc.train.label_smoothing, &estimate);
  clear_tape();
  return r.total.rel_variance * r.total.grad_norm * r.total.grad_norm / sampling_;
}

MemoryPlan plan_memory(const Config& c) {
  PACKRAT_CHECK(c.memory.plan == "auto" && c.memory.budget_bytes > 0, "plan_memory: memory.plan auto and a budget");
  MemoryPlan p;
  p.budget = c.memory.budget_bytes;
  p.batch = c.data.batch_size;
  std::vector<PlanOption> options = plan_options(c);
  // What no option changes, first: a budget below it cannot hold any.
  const Resident r = resident_bytes(with_option(c, options.front().overrides));
  const int64_t resident = r.parameters + r.gradients + r.optimizer_state;
  PACKRAT_CHECK(resident < p.budget,
                "{}: memory.budget {} ({} bytes) cannot hold a training step of this model: its parameters take {} "
                "bytes, their gradients {} bytes and the optimizer state {} bytes, {} bytes whatever the batch and "
                "the option",
                c.source, c.memory.budget, p.budget, r.parameters, r.gradients, r.optimizer_state, resident);
  for (const PlanOption& o : options) {
    p.options.push_back(profile(c, o, p.batch));
    const PlanMeasure& m = p.options.back();
    spdlog::info("plan: {} {}", o.name,
                 m.refused.empty() ? fmt::format("predicts a peak of {} at batch {}, {:.1f} img/s at batch {}",
                                                 format_bytes(m.predicted_peak), p.batch, m.img_per_s, 2 * m.small_batch)
                                   : "cannot run here: " + m.refused);
  }
  // Per segment: a level faster than every option that may fit, but over the budget itself, keeps
  // its storage and recomputes the fewest of the model's blocks that bring it within it; one that
  // stores without recomputing also stores the fewest blocks (with the stem) as the fastest
  // storage level that fits, on the same kernels. One that recomputes every block and keeps its
  // tensors exact (`recompute`) stores the stem and the inputs of the fewest blocks as the fastest
  // compressing storage level instead: each segment kept, compressed or recomputed, and the
  // recomputed ones' inputs kept or compressed. On a device with a second memory a storing level
  // also moves the fewest blocks' tensors (with the stem's) to the host: a segment offloaded.
  const ModelBlocks model = model_blocks(c);
  const size_t levels = options.size();
  auto fits = [&](size_t i) { return p.options[i].refused.empty() && predicted_within(p.options[i].predicted_peak, p.budget); };
  auto same_kernels = [&](size_t i, size_t j) {
    return has_override(options[i].overrides, "conv_algorithm=direct") == has_override(options[j].overrides, "conv_algorithm=direct");
  };
  std::vector<BlockSearch> searches;
  for (size_t i = 0; i < levels && !model.blocks.empty(); ++i) {
    const PlanMeasure& m = p.options[i];
    if (!m.refused.empty() || m.img_per_s <= fastest_fitting(p.options, p.budget) || fits(i)) continue;
    const size_t n = model.blocks.size();
    auto stored_as = [&](size_t j) {
      return fewest_blocks(c, n, [&](size_t k) { return with_stored_blocks(options[i], options[j], model, k); }, options,
                           p.options);
    };
    if (recomputes(options[i])) {
      if (!recomputes_every_block(options[i]) || options[i].storage != "scheme: fp32") continue;
      std::optional<size_t> storage;  // the fastest compressing storage level, on level i's kernels
      for (size_t j = 0; j < levels; ++j)
        if (stores_only(options[j]) && options[j].storage != options[i].storage && p.options[j].refused.empty() &&
            same_kernels(i, j) && (!storage || p.options[j].img_per_s > p.options[*storage].img_per_s))
          storage = j;
      if (storage) searches.push_back(stored_as(*storage));
      continue;
    }
    searches.push_back(fewest_blocks(c, n, [&](size_t k) { return with_recomputed_blocks(options[i], model.blocks, k); },
                                           options, p.options));
    if (!stores_only(options[i])) continue;
    if (offloads_segments(c, options[i]))
      searches.push_back(fewest_blocks(c, n, [&](size_t k) { return with_offloaded_blocks(options[i], model, k); },
                                             options, p.options));
    std::optional<size_t> storage;  // the fastest storage level that fits, on level i's kernels
    for (size_t j = 0; j < levels; ++j)
      if (j != i && stores_only(options[j]) && options[j].storage != options[i].storage && fits(j) && same_kernels(i, j) &&
          (!storage || p.options[j].img_per_s > p.options[*storage].img_per_s))
        storage = j;
    if (storage) searches.push_back(stored_as(*storage));
  }
  // Every probe joins the choice (the fastest that may fit wins, as among the levels).
  for (BlockSearch& search : searches)
    for (auto& [option, measure] : search.probes) {
      options.push_back(std::move(option));
      p.options.push_back(std::move(measure));
    }
  // The fastest option that may fit, checked by a real step at the batch; re-planned while a
  // check finds a peak over the budget or more than 5% off.
  // GACT's criterion, measured for an option when the choice reaches it (the sampling variance once).
  p.max_variance_ratio = c.memory.max_variance_ratio;
  std::optional<VarianceCheck> variance;
  // p.options[i] is the profile of options[i].
  auto within_variance_bound = [&](size_t i) {
    PlanMeasure& m = p.options[i];
    if (p.max_variance_ratio > 0 && std::isnan(m.variance_ratio)) {
      if (!variance) {
        variance.emplace(c, std::max<int64_t>(2, p.batch / 4));
        p.sampling_variance = variance->sampling_variance();
        p.variance_inputs = variance->inputs();
      }
      m.variance_ratio = variance->ratio(options[i]);
      m.too_noisy = m.variance_ratio > p.max_variance_ratio;  // NaN (exact): false
      if (!std::isnan(m.variance_ratio))
        spdlog::info("plan: {} adds {:.3g} of the gradient's sampling variance (bound {:g})", m.option, m.variance_ratio,
                     p.max_variance_ratio);
    }
    return !m.too_noisy;
  };
  // Whether option i's step at the batch fits; a peak over the budget or more than 5% from the
  // prediction counts a re-plan (the measurement replaces the prediction in the choice).
  auto check = [&](size_t i) {
    PlanMeasure& m = p.options[i];
    const BenchmarkResult step = checked_step(c, options[i]);
    m.measured_peak = step.peak_bytes;
    m.checked_img_per_s = step.img_per_s;
    const double off = static_cast<double>(m.measured_peak - m.predicted_peak) /
                       static_cast<double>(m.predicted_peak);  // signed: below the prediction < 0
    spdlog::info("plan: {} at batch {}: measured peak {} against {} predicted ({:+.1f}%), {:.1f} img/s", m.option,
                 p.batch, format_bytes(m.measured_peak), format_bytes(m.predicted_peak), 100.0 * off,
                 m.checked_img_per_s);
    m.fits = m.measured_peak <= p.budget;
    if (std::abs(off) > kRecheckTolerance || !m.fits) ++p.replans;
    return m.fits;
  };
  std::optional<size_t> chosen;
  for (;;) {
    std::optional<size_t> i;
    for (size_t k = 0; k < p.options.size(); ++k) {
      const PlanMeasure& m = p.options[k];
      if (m.refused.empty() && may_fit(m, p.budget) && (!i || m.img_per_s > p.options[*i].img_per_s)) i = k;
    }
    if (!i) break;
    if (!within_variance_bound(*i)) continue;
    if (p.options[*i].measured_peak > 0) {  // checked already, and within the budget
      chosen = i;
      break;
    }
    if (check(*i)) {
      chosen = i;
      break;
    }
  }
  // The race: the options the profile could not tell from the leader, checked at the batch too.
  if (chosen) {
    std::vector<size_t> raced = {*chosen};
    for (const size_t i : race_entrants(p.options, *chosen, p.budget)) {
      if (raced.size() >= kRaceEntrants) break;
      if (!within_variance_bound(i)) continue;
      check(i);
      raced.push_back(i);
    }
    if (raced.size() > 1) {
      chosen = race_winner(p.options, *chosen);
      std::string times;
      for (const size_t i : raced) {
        const PlanMeasure& m = p.options[i];
        times += fmt::format("{}{} {:.1f} img/s{}", times.empty() ? "" : ", ", m.option, m.checked_img_per_s,
                             m.fits ? "" : " (over the budget)");
      }
      spdlog::info("plan: raced at batch {}: {}; trains {}", p.batch, times, p.options[*chosen].option);
    }
  }
  if (!chosen) {
    int64_t least = 0;
    std::string which;
    for (const PlanMeasure& m : p.options) {
      const int64_t peak = m.measured_peak > 0 ? m.measured_peak : m.predicted_peak;
      if (m.refused.empty() && (which.empty() || peak < least)) least = peak, which = m.option;
    }
    const auto noisy = std::count_if(p.options.begin(), p.options.end(), [](const PlanMeasure& m) { return m.too_noisy; });
    fail("{}: memory.budget {} ({} bytes) holds no option at data.batch_size {}: the smallest peak is {}'s, {} bytes "
         "(parameters, gradients and optimizer state {} bytes of it){}; give a larger budget or a smaller batch",
         c.source, c.memory.budget, p.budget, p.batch, which, least, resident,
         noisy == 0 ? std::string()
                    : fmt::format(", and {} option{} within it add{} more gradient variance than memory.max_variance_ratio "
                                  "{:g} allows",
                                  noisy, noisy == 1 ? "" : "s", noisy == 1 ? "s" : "", p.max_variance_ratio));
  }
  p.chosen = options[*chosen].name;
  p.overrides = options[*chosen].overrides;
  p.predicted_peak = p.options[*chosen].predicted_peak;
  p.measured_peak = p.options[*chosen].measured_peak;
  return p;
}

std::vector<size_t> race_entrants(const std::vector<PlanMeasure>& measured, size_t leader, int64_t budget) {
  std::vector<size_t> entrants;
  const std::string exact_name = fp32_level().name;
  std::optional<size_t> exact;  // L0, which enters whatever its profile's img/s
  for (size_t i = 0; i < measured.size(); ++i) {
    const PlanMeasure& m = measured[i];
    if (i == leader || !m.refused.empty() || m.measured_peak != 0 || !may_fit(m, budget)) continue;
    if (m.option == exact_name) exact = i;
    else if (m.img_per_s >= kRaceBand * measured[leader].img_per_s) entrants.push_back(i);
  }
  std::stable_sort(entrants.begin(), entrants.end(),
                   [&](size_t a, size_t b) { return measured[a].img_per_s > measured[b].img_per_s; });
  if (exact) entrants.insert(entrants.begin(), *exact);
  return entrants;
}

size_t race_winner(const std::vector<PlanMeasure>& measured, size_t leader) {
  size_t best = leader;
  for (size_t i = 0; i < measured.size(); ++i) {
    const PlanMeasure& m = measured[i];
    if (m.measured_peak > 0 && m.fits && !m.too_noisy && m.checked_img_per_s > measured[best].checked_img_per_s)
      best = i;
  }
  return best;
}

std::optional<ConfirmedBatch> confirm_largest(std::vector<int64_t>& batches, int64_t limit,
                                              const std::function<int64_t(size_t, int64_t)>& checked) {
  std::vector<int64_t> peaks(batches.size(), -1);  // the check's peak at an option's batch (-1: not checked)
  for (;;) {
    std::optional<size_t> best;  // the first of the largest
    for (size_t i = 0; i < batches.size(); ++i)
      if (batches[i] > 0 && (!best || batches[i] > batches[*best])) best = i;
    if (!best) return std::nullopt;
    const size_t i = *best;
    if (peaks[i] >= 0) return ConfirmedBatch{i, batches[i], peaks[i]};
    const int64_t peak = checked(i, batches[i]);
    if (peak <= limit) {
      peaks[i] = peak;
      continue;  // the largest still, unless another option's unchecked batch is larger
    }
    // Lowered by the excess over the bytes a sample takes at most (the peak over the batch).
    const int64_t per_sample = std::max<int64_t>(1, peak / batches[i]);
    batches[i] -= std::max<int64_t>(1, (peak - limit + per_sample - 1) / per_sample);
  }
}

PlannedMaxBatch plan_max_batch(const Config& c, int64_t limit) {
  PlannedMaxBatch r;
  std::vector<PlanOption> options = plan_options(c);
  std::vector<int64_t> batches;  // per option, its largest batch (-1: refused)
  std::optional<VarianceCheck> variance;  // GACT's criterion, as plan_memory applies it
  if (c.memory.max_variance_ratio > 0) variance.emplace(c, std::max<int64_t>(2, c.data.batch_size / 4));
  for (const PlanOption& o : options) {
    const double ratio = variance ? variance->ratio(o) : std::numeric_limits<double>::quiet_NaN();
    int64_t batch = -1;
    if (ratio > c.memory.max_variance_ratio) {
      spdlog::info("plan: {} adds {:.3g} of the gradient's sampling variance, over memory.max_variance_ratio {:g}",
                   o.name, ratio, c.memory.max_variance_ratio);
    } else {
      try {
        batch = find_max_batch(with_option(c, o.overrides), limit).batch_size;
      } catch (const Error& e) {
        spdlog::info("plan: {} cannot run here: {}", o.name, e.what());
      }
      spdlog::info("plan: {}: largest batch {}", o.name, batch);
    }
    batches.push_back(batch);
  }
  // The search's trials allocate GACT's bits as its warm-up step did, on other samples than the
  // plan's check at the batch; at the edge of the limit the two may differ by about 1% (once the
  // ViT's gact-CB2 in bf16: 344 found, its check 0.9% over), and a largest batch the plan then
  // refuses to train at is no answer: so the largest is confirmed by the check plan_memory runs there.
  const std::optional<ConfirmedBatch> best = confirm_largest(batches, limit, [&](size_t i, int64_t batch) {
    Config at = c;
    at.data.batch_size = batch;
    const int64_t peak = checked_step(at, options[i]).peak_bytes;
    spdlog::info("plan: {} at batch {}: the check's peak {} bytes {}", options[i].name, batch, peak,
                 peak <= limit ? "holds" : "is over the limit");
    return peak;
  });
  for (size_t i = 0; i < options.size(); ++i) r.per_option.emplace_back(options[i].name, batches[i]);
  if (best) r.chosen = options[best->option].name, r.batch_size = best->batch, r.peak_bytes = best->peak;
  return r;
}

Json MemoryPlan::json() const {
  Json j = Json::object();
  j["budget"] = Json(budget);
  j["batch"] = Json(batch);
  j["chosen"] = Json(chosen);
  j["overrides"] = Json(overrides);
  j["predicted_peak"] = Json(predicted_peak);
  j["measured_peak"] = Json(measured_peak);
  j["replans"] = Json(replans);
  j["max_variance_ratio"] = Json(max_variance_ratio);
  j["sampling_variance"] = std::isnan(sampling_variance) ? Json() : Json(sampling_variance);
  j["variance_inputs"] = Json(variance_inputs);
  Json list = Json::array();
  for (const PlanMeasure& m : options) {
    Json o = Json::object();
    o["option"] = Json(m.option);
    o["refused"] = Json(m.refused);
    o["small_batch"] = Json(m.small_batch);
    o["peak_small"] = Json(m.peak_small);
    o["peak_double"] = Json(m.peak_double);
    o["img_per_s"] = Json(m.img_per_s);
    o["predicted_peak"] = Json(m.predicted_peak);
    o["measured_peak"] = Json(m.measured_peak);
    o["checked_img_per_s"] = Json(m.checked_img_per_s);
    o["fits"] = Json(m.fits);
    o["variance_ratio"] = std::isnan(m.variance_ratio) ? Json() : Json(m.variance_ratio);
    o["too_noisy"] = Json(m.too_noisy);
    list.push_back(o);
  }
  j["options"] = list;
  return j;
}

std::string MemoryPlan::table() const {
  std::string s = fmt::format(
      "Memory plan (memory.plan: auto): budget {} at batch {}; chosen: {}\n{:<32} {:>16} {:>16} {:>12} {:>12} {:>9} {}\n",
      format_bytes(budget), batch, chosen, "option", "predicted peak", "measured peak", "img/s",
      fmt::format("at {}", batch), "variance", "");
  for (const PlanMeasure& m : options) {
    if (!m.refused.empty()) {
      s += fmt::format("{:<32} cannot run here: {}\n", m.option, m.refused.substr(0, 100));
      continue;
    }
    s += fmt::format("{:<32} {:>16} {:>16} {:>12.1f} {:>12} {:>9} {}\n", m.option, format_bytes(m.predicted_peak),
                     m.measured_peak > 0 ? format_bytes(m.measured_peak) : std::string("-"), m.img_per_s,
                     m.measured_peak > 0 ? fmt::format("{:.1f}", m.checked_img_per_s) : std::string("-"),
                     std::isnan(m.variance_ratio) ? std::string("-") : fmt::format("{:.3g}", m.variance_ratio),
                     m.option == chosen ? "<- chosen"
                     : m.too_noisy      ? "over the variance bound"
                     : m.fits           ? "fits"
                                        : "over the budget");
  }
  if (!std::isnan(sampling_variance))
    s += fmt::format("variance: the gradient variance an option's compression adds, over its sampling variance between "
                     "batches ({:.4g}, {}); bound {:g}\n",
                     sampling_variance, variance_inputs, max_variance_ratio);
  return s;
}

}  // namespace packrat
