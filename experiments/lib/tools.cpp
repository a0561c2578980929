#include "experiments/lib/tools.h"

#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string_view>

#include "autograd/tape.h"
#include "core/device_runtime.h"
#include "core/parallel.h"
#include "experiments/lib/checkpoint_stores.h"
#include "experiments/lib/distributed_run.h"
#include "experiments/lib/memory_timeline_plot.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "quant/group/gact_store.h"

namespace packrat {

namespace {
StepOptions step_options(const Config& c, bool capture) {
  StepOptions o;
  o.label_smoothing = c.train.label_smoothing;
  o.clip_grad_norm = c.train.clip_grad_norm;
  o.capture_saved = capture;
  return o;
}
// Refuses a --find-max-batch limit beyond what this process can really allocate on the host: a
// step would then fail outside the allocator's limit (std::bad_alloc, or a crash inside oneDNN
// under ulimit -v) and the answer would be wrong. `held`: the tensor bytes already allocated.
void check_host_can_hold(int64_t limit, int64_t held) {
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * page;
  PACKRAT_CHECK(physical <= 0 || limit <= physical,
                "--find-max-batch: {} bytes is more than this machine's {} bytes of memory; give at most that", limit,
                physical);
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return;
  int64_t vm_pages = 0;  // the address space in use now (/proc/self/statm's first field)
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%" SCNd64, &vm_pages) != 1) vm_pages = 0;
    std::fclose(f);
  }
  // A step also needs address space the limit does not count: oneDNN's primitives and JIT code,
  // malloc's per-thread arenas, freed blocks the allocator caches for reuse within the step. At a
  // limit of 2.2 GB under ulimit -v 3G a step crashed inside oneDNN; half the room is kept for it.
  const int64_t room = static_cast<int64_t>(as.rlim_cur) - vm_pages * page;
  const int64_t usable = held + room / 2;
  PACKRAT_CHECK(limit <= usable,
                "--find-max-batch: {} bytes is more than this process can allocate: its address space is limited to "
                "{} bytes (ulimit -v), {} of them in use; give at most {} bytes (or raise ulimit -v)",
                limit, static_cast<int64_t>(as.rlim_cur), vm_pages * page, usable);
}

// Whether a store of the policy runs GACT's measured estimator, whose refresh runs one more
// backward per saved tensor it estimates (every tensor at the first refresh, by default).
bool estimates_by_extra_passes(StorePolicy& policy) {
  const std::vector<GactStore*> gact = find_gact_stores(policy);
  return std::any_of(gact.begin(), gact.end(),
                     [](const GactStore* g) { return g->gact_options().estimator == GactEstimator::Measured; });
}

// GACT's measured estimator makes a run's first step cost one step more per saved tensor: on the
// 24-layer encoder at batch 100 about 480 steps, over an hour on 2 cores.
//
// GACT's first estimate of a config, whatever its batch: the plan's profile measures each option at
// two batches and checks the chosen one at a third, --find-max-batch tries one batch after another,
// each in a fresh session that would estimate again on the same kFirstEstimateBatch samples (one
// backward per saved tensor: 25 minutes of the 24-layer encoder's 50-minute plan). Each GACT store's
// table (sensitivities and bits) and counters are kept as bytes outside the allocator, so that no
// later measurement's peak holds them; the gradient statistics are not: each session observes its own.
struct CachedStateEntry {
  std::string name;
  DType dtype;
  std::vector<uint8_t> bytes;  // the entry's numel * dtype_size bytes
};
using CachedGactState = std::vector<std::vector<CachedStateEntry>>;  // one per GACT store of the policy

std::mutex first_estimates_mutex;
std::map<std::string, CachedGactState>& first_estimates() {
  static std::map<std::string, CachedGactState> estimates;  // config_to_yaml at kFirstEstimateBatch -> state
  return estimates;
}

// GACT's sensitivities of a model, its weights and a batch, whatever the storage (GactStore::
// adopt_sensitivities): the config at kFirstEstimateBatch with the levers the plan's options set
// (saved_tensors, memory, model.attention, conv_algorithm) at their defaults -> every tensor
// estimated so far in this process, by name. The plan's GACT options and their probes of
// recomputed segments share most of their tensors: an option's estimate measures only those no
// earlier one did (a recomputed segment's input, a memory-efficient attention's tensors). The
// attention and the convolution kernels compute the same function up to rounding (a memory-
// efficient attention draws other dropout masks), as the batches after a refresh differ from its.
// Keyed by sensitivity_key (below).
std::map<std::string, KnownSensitivities>& known_sensitivities() {
  static std::map<std::string, KnownSensitivities> known;
  return known;
}

std::string model_key(const Config& c) {
  Config k = c;
  k.data.batch_size = kFirstEstimateBatch;
  k.saved_tensors = StorePolicySpec{.seed = c.saved_tensors.seed};
  k.memory = MemoryConfig{};
  k.model.attention.clear();
  k.conv_algorithm = "auto";
  return config_to_yaml(k);
}

// ... and of what a store's c_l are in: the variance's units (relative or absolute) and the groups
// whose ranges scale its rounding noise. Stores that differ in these measure their own.
std::string sensitivity_key(const std::string& model, const GactStore& g) {
  const GroupQuantConfig& q = g.gact_options().store.quant;
  return fmt::format("{}# variance {}, group {} grouping {} meta {} rounding {}", model,
                     g.relative_variance() ? "relative" : "absolute", q.group_size, static_cast<int>(q.grouping),
                     static_cast<int>(q.meta), static_cast<int>(q.rounding));
}

std::vector<CachedStateEntry> cached_entries(const GactStore& store) {
  std::vector<CachedStateEntry> out;
  for (const auto& [name, t] : store.export_state()) {
    if (name == "grad_mean") continue;
    const auto* p = static_cast<const uint8_t*>(t.raw());
    const bool gradient_statistic = name == "grad_count" || name == "grad_m2";  // zero: no step observed
    out.push_back({name, t.dtype(),
                   gradient_statistic ? std::vector<uint8_t>(t.nbytes(), 0) : std::vector<uint8_t>(p, p + t.nbytes())});
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> state_of(const std::vector<CachedStateEntry>& entries) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const CachedStateEntry& e : entries) {
    Tensor t = Tensor::empty(Shape{static_cast<int64_t>(e.bytes.size() / dtype_size(e.dtype))}, e.dtype, Layout::Plain,
                             MemTag::Workspace, Device::cpu());  // (n,) host
    std::memcpy(t.raw(), e.bytes.data(), e.bytes.size());
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

// A measurement of the steady step (the memory report, a benchmark) runs GACT's first refresh in a
// step at kFirstEstimateBatch on the same session when the batch is larger, or takes that refresh's
// result from an identical config's earlier measurement in this process: its stores keep the bits
// it allocated, and the step at the batch that follows (step 0 again) does not refresh. The bits
// are GACT's own allocation from fewer samples; the budget of bits is the same.
void estimate_on_a_small_batch(Session& s, const Config& c, const InputSpec& in) {
  if (c.data.batch_size <= kFirstEstimateBatch || !estimates_by_extra_passes(*s.policy)) return;
  const std::vector<GactStore*> stores = find_gact_stores(*s.policy);
  Config keyed = c;
  keyed.data.batch_size = kFirstEstimateBatch;
  const std::string key = config_to_yaml(keyed);
  const std::string model = model_key(c);
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(first_estimates_mutex);
    auto it = first_estimates().find(key);
    if (it != first_estimates().end() && it->second.size() == stores.size()) {
      for (size_t i = 0; i < stores.size(); ++i)
        stores[i]->import_state(state_of(it->second[i]), "an identical config's first GACT estimate");
      cached = true;
    } else {
      for (GactStore* g : stores)
        if (const auto known = known_sensitivities().find(sensitivity_key(model, *g)); known != known_sensitivities().end())
          g->adopt_sensitivities(known->second);
    }
  }
  SyntheticBatch few = synthetic_inputs(c, in, kFirstEstimateBatch);
  train_step(*s.model, *s.optimizer, *s.policy, few.images, few.labels, 0, step_options(c, false));  // refreshes unless cached
  clear_tape();
  if (cached) return;
  CachedGactState state;
  int64_t adopted = 0, measured = 0;
  std::lock_guard<std::mutex> lock(first_estimates_mutex);
  for (const GactStore* g : stores) {
    state.push_back(cached_entries(*g));
    adopted += g->last_adopted();
    measured += static_cast<int64_t>(g->tensors().size()) - g->last_adopted();
    if (g->gact_options().estimator == GactEstimator::Measured)  // not the analytic one's c_l
      known_sensitivities()[sensitivity_key(model, *g)].merge(g->measured_sensitivities());  // the tensors no earlier estimate named
  }
  first_estimates()[key] = std::move(state);
  if (adopted > 0)
    spdlog::info("gact: first estimate on {} samples: {} tensors measured, {} sensitivities taken from this model's "
                 "earlier estimates under other storage", kFirstEstimateBatch, measured, adopted);
}

}  // namespace

MemoryReport memory_report_only(const Config& c, MemoryTimeline* timeline) {
  make_writable_directory(c.output.dir, "output.dir");  // before the step, not after it
  apply_process_settings(c);
  const RunDevice on(c);
  const InputSpec in = synthetic_input_spec(c);
  Session s = make_session(c, in);
  estimate_on_a_small_batch(s, c, in);
  SyntheticBatch b = synthetic_inputs(c, in, c.data.batch_size);
  // The report is of the second step: the first allocates the optimizer's state at its update, after
  // the backward's peak, but every later step's backward holds it (AdamW: twice the parameters' bytes),
  // as it holds what else a first step leaves allocated (GACT's running mean of the gradient). Both
  // are step 0: the reported step draws the rounding noise and masks the first step of a run draws.
  train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, step_options(c, false));
  StepResult r;
  {
    const TimelineScope record(Allocator::of(on.device()), timeline);
    r = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, step_options(c, true));
  }
  MemoryReport report = make_memory_report(c.data.batch_size, r, s.recomputed);
  report.synthetic = true;
  write_memory_report(report, c.output.dir);
  if (timeline) write_memory_timeline(*timeline, report, c.output.dir);
  return report;
}

Json BenchmarkResult::json() const {
  Json j = Json::object();
  j["img_per_s"] = Json(img_per_s);
  j["peak_bytes"] = Json(peak_bytes);
  j["saved_bytes"] = Json(saved_bytes);
  j["device"] = Json(device);
  j["forward_ms"] = Json(forward_ms);
  j["recompute_ms"] = Json(recompute_ms);
  j["backward_ms"] = Json(backward_ms);
  j["precision"] = Json(precision);
  auto ratio = [&](int64_t baseline) {
    return baseline > 0 ? static_cast<double>(saved_bytes) / static_cast<double>(baseline) : 0.0;
  };
  j["saved_vs_fp32_store"] = Json(ratio(saved_fp32_bytes));
  j["saved_vs_f32"] = Json(ratio(saved_f32_bytes));
  if (ranks > 1) {
    j["ranks"] = Json(ranks);
    j["threads"] = Json(static_cast<int64_t>(num_threads()));
    j["exposed_reduce_s_per_step"] = Json(exposed_reduce_s);
    j["reduce_alone_s"] = Json(reduce_alone_s);
    j["started_in_backward"] = Json(started_in_backward);
    j["completed_in_backward"] = Json(completed_in_backward);
  }
  if (offload) {
    Json o = Json::object();
    o["bytes_to_host"] = Json(offload_to_host_bytes);
    o["bytes_to_device"] = Json(offload_to_device_bytes);
    o["copy_busy_ms"] = Json(copy_busy_ms);
    o["synchronous_loads"] = Json(synchronous_loads);
    o["forward_waits"] = Json(forward_waits);
    j["offload"] = o;
  }
  return j;
}

BenchmarkBed benchmark_bed(const Config& c, DataParallel* dp) {
  const InputSpec in = synthetic_input_spec(c);
  BenchmarkBed bed{make_session(c, in), {}, step_options(c, false)};
  estimate_on_a_small_batch(bed.session, c, in);  // on each rank alone, before the data-parallel session
  const int64_t ranks = dp ? dp->size() : 1;
  // Each rank its own part of the global batch (a different synthetic batch per rank).
  bed.batch = synthetic_inputs(c, in, c.data.batch_size / ranks, static_cast<uint64_t>(dp ? dp->rank() : 0));
  {  // the batch waits on the device, as a benchmark's batch does in PyTorch: the steps time the model
    TagScope tag(MemTag::Data);
    const Device device = Device::parse(c.device);
    bed.batch.images = bed.batch.images.to(device);
    bed.batch.labels = bed.batch.labels.to(device);
  }
  bed.options.time_phases = true;
  return bed;
}

StepResult BenchmarkBed::step(int64_t i) {
  return train_step(*session.model, *session.optimizer, *session.policy, batch.images, batch.labels, i, options);
}

BenchmarkResult BenchmarkResult::before_steps(const Config& c, int64_t steps) {
  BenchmarkResult r;
  r.steps = steps;
  r.batch_size = c.data.batch_size;
  r.device = Device::parse(c.device).str();
  r.precision = std::string(precision_name(run_precision(c).precision));
  return r;
}

void BenchmarkResult::add_step(const StepResult& sr) {
  const double per = 1.0 / static_cast<double>(steps);
  peak_bytes = std::max(peak_bytes, sr.memory.total_peak);
  saved_bytes = sr.saved_record_bytes;
  saved_fp32_bytes = sr.saved_record_fp32_bytes;
  saved_f32_bytes = sr.saved_record_f32_bytes;
  forward_ms += sr.forward_s * 1e3 * per;
  recompute_ms += sr.recompute.recompute_s * 1e3 * per;
  backward_ms += (sr.backward_s - sr.recompute.recompute_s) * 1e3 * per;
  if (sr.offload.on) {
    offload = true;
    offload_to_host_bytes += static_cast<double>(sr.offload.moved.bytes_to_host) * per;
    offload_to_device_bytes += static_cast<double>(sr.offload.moved.bytes_to_device) * per;
    copy_busy_ms += sr.offload.moved.copy_busy_s * 1e3 * per;
    synchronous_loads += static_cast<double>(sr.offload.moved.synchronous_loads) * per;
    forward_waits += static_cast<double>(sr.offload.moved.forward_waits) * per;
  }
}

BenchmarkResult benchmark(const Config& c, int64_t steps, DataParallel* dp) {
  PACKRAT_CHECK(steps >= 1, "--benchmark: STEPS must be at least 1, got {}", steps);
  apply_process_settings(c);
  const RunDevice on(c);
  BenchmarkBed bed = benchmark_bed(c, dp);
  const int64_t ranks = dp ? dp->size() : 1;
  DataParallelSession dp_session(dp, *bed.session.model, c.distributed);
  DataParallelStep* dp_step = dp_session.step();
  if (dp) {
    bed.options.sync = dp_step;
    bed.options.global_count = c.data.batch_size * labels_per_sample(c);  // labels, as StepResult::count
  }
  bed.step(0);  // warm-up
  BenchmarkResult r = BenchmarkResult::before_steps(c, steps);
  r.ranks = ranks;
  if (dp) dp->comm->barrier("benchmark start");
  synchronize(on.device());  // the clock starts on an idle GPU and stops once it has finished the steps
  profiled_range_begin(on.device());
  const auto start = std::chrono::steady_clock::now();
  int64_t completed_bytes = 0, reduced_bytes = 0;
  for (int64_t i = 1; i <= steps; ++i) {
    r.add_step(bed.step(i));
    if (dp_step) {
      r.exposed_reduce_s += dp_step->timing().exposed_s;
      r.started_in_backward = static_cast<double>(dp_step->timing().bytes_started_in_backward) /
                              static_cast<double>(std::max<int64_t>(1, dp_step->timing().bytes));
      completed_bytes += dp_step->timing().bytes_completed_in_backward;
      reduced_bytes += dp_step->timing().bytes;
    }
  }
  if (dp) {
    dp->comm->barrier("benchmark end");
    std::vector<double> exposed{r.exposed_reduce_s};
    sum_over_ranks(*dp, exposed, "benchmark timing");
    r.exposed_reduce_s = exposed[0] / static_cast<double>(ranks * steps);
    r.completed_in_backward = static_cast<double>(completed_bytes) / static_cast<double>(std::max<int64_t>(1, reduced_bytes));
  }
  synchronize(on.device());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profiled_range_end(on.device());
  if (dp_step) {
    std::vector<double> alone;
    for (int i = 0; i < 5; ++i) alone.push_back(dp_step->time_reduction_alone());
    std::sort(alone.begin(), alone.end());
    r.reduce_alone_s = alone[2];
  }
  r.img_per_s = static_cast<double>(steps * c.data.batch_size) / r.seconds;
  return r;
}

namespace {

// Whether a GACT store of the policy re-allocates its bits from every step's statistics
// (actnn-L3: the analytic estimator at adapt_interval 1).
bool allocates_every_step(StorePolicy& policy) {
  for (SavedTensorStore* st : policy.stores())
    if (const auto* g = dynamic_cast<const GactStore*>(st); g && g->gact_options().adapt_interval == 1) return true;
  return false;
}

// The sensitivity refreshes GACT's stores in `policy` have run.
int64_t gact_refreshes(StorePolicy& policy) {
  int64_t n = 0;
  for (SavedTensorStore* st : policy.stores())
    if (const auto* g = dynamic_cast<const GactStore*>(st)) n += g->refreshes();
  return n;
}

}  // namespace

MaxBatchResult find_max_batch(const Config& c, int64_t limit, int64_t upper) {
  PACKRAT_CHECK(limit > 0, "--find-max-batch: BYTES must be positive, got {}", limit);
  apply_process_settings(c);
  const RunDevice on(c);
  const InputSpec in = synthetic_input_spec(c);
  Session s = make_session(c, in);
  Allocator& alloc = Allocator::of(on.device());  // the device's: its limit, its peaks
  StepOptions trial = step_options(c, false);
  trial.allow_non_finite_loss = true;  // the trials measure memory, not the loss
  {  // the optimizer state exists before the search, as it does in training; GACT's measured
     // estimator allocates its bits on kFirstEstimateBatch samples, as a benchmark and the plan's
     // check do before their steps (the trials carry them)
    SyntheticBatch b = synthetic_inputs(c, in, estimates_by_extra_passes(*s.policy) ? kFirstEstimateBatch : 1);
    train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, trial);
  }
  // The trials measure memory: they run the update (its memory counts) at learning rate 0, so
  // that a model trained on a few tiny batches at the config's rate cannot diverge to a non-finite
  // loss, which would end the search with an error that says nothing about memory.
  s.optimizer->set_lr(0.0);
  MaxBatchResult result;
  result.limit = limit;
  PACKRAT_CHECK(alloc.total_current() < limit,
                "--find-max-batch: the model and its optimizer state alone hold {} bytes, more than the limit {}",
                alloc.total_current(), limit);
  if (on.device().is_cpu()) check_host_can_hold(limit, alloc.total_current());
  auto host_refused = [&](int64_t n, const std::string& why) {
    alloc.set_limit(0);
    fail("--find-max-batch: batch {} ran out of memory below the limit of {} bytes ({}): the process cannot hold "
         "that much (ulimit -v, or the device's memory); give a smaller limit",
         n, limit, why);
  };
  // Runs one step at batch n under the limit; the peak, or -1 when it does not fit. steady: on
  // the policy of the trial before (at n), whose adaptive state that step left.
  auto fits = [&](int64_t n, bool steady = false) -> int64_t {
    ++result.trials;
    // A fresh policy per trial: an out-of-memory in the middle of a step must leave nothing behind.
    // It starts from the adaptive stores' state of the policy before it (the warm-up step's first:
    // GACT's bit allocation and gradient statistics), as a resumed run does, so that a trial
    // measures a training step and not GACT's first-step measurement (on bert_base: 7 minutes at
    // batch 1 on 2 cores). The carried copy is gone before the step, whose peak starts afresh.
    if (!steady) {
      SafetensorsFile carried;
      append_store_state(carried.tensors, s.policy->stores());
      auto fresh = make_policy(c, *s.model);
      restore_store_state(carried, fresh->stores(), "--find-max-batch (the previous step's adaptive state)");
      s.policy = std::move(fresh);
    }
    const int64_t refreshes_before = gact_refreshes(*s.policy);
    int64_t peak = -1;
    try {
      alloc.set_limit(limit);
      SyntheticBatch b = synthetic_inputs(c, in, n);
      StepResult r = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, result.trials, trial);
      peak = r.memory.total_peak;
    } catch (const LimitExceeded&) {
      peak = -1;  // only the allocator's limit says "does not fit"
    } catch (const OutOfMemory& e) {
      host_refused(n, e.what());  // the device (or the host, under ulimit -v) refused memory below the limit
    } catch (const std::bad_alloc&) {
      host_refused(n, "std::bad_alloc");
    }
    alloc.set_limit(0);
    result.refreshes += gact_refreshes(*s.policy) - refreshes_before;
    clear_tape();
    s.model->zero_grad();
    spdlog::info("batch {}: {}", n, peak < 0 ? std::string("out of memory") : fmt::format("fits, peak {} bytes", peak));
    return peak;
  };
  int64_t lo = 0, hi = 0, lo_peak = 0;  // lo fits (0: nothing yet), hi does not (0: unknown)
  for (int64_t n = 1; n <= upper; n *= 2) {
    const int64_t p = fits(n);
    if (p < 0) {
      hi = n;
      break;
    }
    lo = n;
    lo_peak = p;
  }
  if (hi == 0) hi = upper + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t p = fits(mid);
    if (p < 0) {
      hi = mid;
    } else {
      lo = mid;
      lo_peak = p;
    }
  }
  // A store that re-allocates its bits every step allocated each trial's step from the step
  // before, at another batch; training at the batch allocates from its own. The largest batch is
  // confirmed by a second step at it on the same policy (ResNet-50 under actnn-L3: a trial at 398
  // peaked at 767.7 MiB, training's steady step at 806.0), and searched again below it when that
  // step does not fit.
  if (allocates_every_step(*s.policy)) {
    while (lo > 0) {
      int64_t p = fits(lo);
      if (p >= 0) p = fits(lo, true);
      ++result.confirmations;
      if (p >= 0) {
        lo_peak = p;
        break;
      }
      hi = lo;
      lo = std::max<int64_t>(0, lo - std::max<int64_t>(1, lo / 8));  // a little below, then bisect up
      while (lo > 0 && (p = fits(lo)) < 0) hi = lo, lo /= 2;
      if (lo == 0) break;
      lo_peak = p;
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if ((p = fits(mid)) < 0) {
          hi = mid;
        } else {
          lo = mid;
          lo_peak = p;
        }
      }
    }
  }
  result.batch_size = lo;
  result.peak_bytes = lo_peak;
  return result;
}

}  // namespace packrat
