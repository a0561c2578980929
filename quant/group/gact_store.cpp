#include "quant/group/gact_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <queue>
#include <set>

#include "autograd/checkpoint.h"
#include "core/backend.h"
#include "core/error.h"

namespace packrat {

void GactOptions::check(std::string_view where) const {
  store.quant.check(where);
  PACKRAT_CHECK(!candidate_bits.empty(), "{}: GACT needs at least one candidate bit-width", where);
  for (int b : candidate_bits)
    PACKRAT_CHECK(group_bits_supported(b) || b == kPassThroughBits,
                  "{}: GACT candidate bit-width {} is not one of 1, 2, 3, 4, 8, 32", where, b);
  const int lowest = *std::min_element(candidate_bits.begin(), candidate_bits.end());
  PACKRAT_CHECK(avg_bits >= lowest && avg_bits >= 1.0,
                "{}: 'avg_bits' is {}; the budget must be at least {} bit per element", where, avg_bits, lowest);
  PACKRAT_CHECK(adapt_interval >= 1, "{}: 'adapt_interval' must be at least 1, got {}", where, adapt_interval);
  PACKRAT_CHECK(tensors_per_refresh >= 0, "{}: 'tensors_per_refresh' must be >= 0, got {}", where, tensors_per_refresh);
  PACKRAT_CHECK(initial_bits == 0 || group_bits_supported(initial_bits) || initial_bits == kPassThroughBits,
                "{}: 'initial_bits' is {}, must be 1, 2, 3, 4, 8 or 32 (FP32)", where, initial_bits);
}

namespace {

int default_initial_bits(const GactOptions& o) {
  int best = *std::min_element(o.candidate_bits.begin(), o.candidate_bits.end());
  for (int b : o.candidate_bits)
    if (b <= o.avg_bits && b > best) best = b;
  return best;
}

GroupStoreOptions store_options(const GactOptions& o) {
  o.check("gact");
  return o.store;
}

}  // namespace

GactStore::GactStore(GactOptions o) : GroupStore(store_options(o)), gopts_(std::move(o)) {
  if (gopts_.initial_bits == 0) gopts_.initial_bits = default_initial_bits(gopts_);
  set_bits_provider(this);
}

GactOptions GactStore::parse_options(SchemeOptions& o, const GactOptions& base) {
  GactOptions g = base;
  g.avg_bits = o.get_double("avg_bits", base.avg_bits, -1e9, 8.0);
  PACKRAT_CHECK(g.avg_bits >= 1.0, "{}: 'avg_bits' is {}; the budget must be at least 1 bit per element", o.where(),
                g.avg_bits);
  g.adapt_interval = o.get_int("adapt_interval", base.adapt_interval, 1, INT64_MAX);
  g.adapt_warmup = o.get_bool("adapt_warmup", base.adapt_warmup);
  const std::string est = o.get_string("estimator", base.estimator == GactEstimator::Measured ? "measured" : "analytic",
                                       {"measured", "analytic"});
  g.estimator = est == "measured" ? GactEstimator::Measured : GactEstimator::Analytic;
  static constexpr const char* kVariances[] = {"auto", "absolute", "relative"};
  const std::string var = o.get_string("variance", kVariances[static_cast<int>(base.variance)],
                                       {"auto", "absolute", "relative"});
  g.variance = var == "relative" ? GactVariance::Relative : var == "absolute" ? GactVariance::Absolute : GactVariance::Auto;
  g.tensors_per_refresh = o.get_int("tensors_per_refresh", base.tensors_per_refresh, 0, INT64_MAX);
  g.initial_bits = static_cast<int>(o.get_int("initial_bits", base.initial_bits, 0, kPassThroughBits));
  g.warn_ratio = o.get_double("warn_ratio", base.warn_ratio, 0.0, 1e9);
  g.log_path = o.get_string("log_path", base.log_path, {});
  // GACT's max_bits: the widest candidate (8: never FP32).
  const int widest = *std::max_element(base.candidate_bits.begin(), base.candidate_bits.end());
  const int max_bits = static_cast<int>(o.get_int("max_bits", widest, 1, kPassThroughBits));
  PACKRAT_CHECK(group_bits_supported(max_bits) || max_bits == kPassThroughBits,
                "{}: 'max_bits' is {}, must be 1, 2, 3, 4, 8 or 32 (FP32)", o.where(), max_bits);
  std::erase_if(g.candidate_bits, [max_bits](int b) { return b > max_bits; });
  // The per-group store's keys except bits (GACT chooses them): refused when written at all, not
  // only when it differs from the store's default (bits: 2 would otherwise pass and be ignored).
  PACKRAT_CHECK(!o.has("bits"), "{}: 'bits' does not apply to gact (it chooses the bits per tensor); "
                "set 'avg_bits' or 'initial_bits'", o.where());
  g.store = GroupStore::parse_options(o, base.store);
  g.check(o.where());
  return g;
}

std::unique_ptr<SavedTensorStore> make_gact_store(SchemeOptions& o) {
  GactOptions g = GactStore::parse_options(o);
  o.check_all_used();
  return std::make_unique<GactStore>(std::move(g));
}

std::vector<GactStore*> find_gact_stores(StorePolicy& p) {
  std::vector<GactStore*> out;
  for (auto* s : p.stores())
    if (auto* g = dynamic_cast<GactStore*>(s)) out.push_back(g);
  return out;
}

void GactStore::observe_model(const std::vector<std::pair<std::string, Tensor>>& named_parameters) {
  set_conv_kernels(conv_kernel_elements(named_parameters));
  parameters_ = 0;
  for (const auto& [name, p] : named_parameters) parameters_ += p.numel();
}

void GactStore::set_update_normalised(bool normalised) { update_normalised_ = normalised; }

bool GactStore::relative_variance() const {
  return gopts_.variance == GactVariance::Relative || (gopts_.variance == GactVariance::Auto && update_normalised_);
}

void GactStore::log_to(const std::string& run_dir, int index) {
  if (run_dir.empty())
    set_log_path("");
  else if (gopts_.log_path.empty())
    set_log_path((std::filesystem::path(run_dir) / (index == 0 ? std::string("gact_bits.csv")
                                                               : fmt::format("gact_bits_{}.csv", index)))
                     .string());
}

int GactStore::bits_for(int64_t, const SaveRequest&, const Tensor&) { return pending_bits_; }

int GactStore::bits_to_save(int64_t l) const {
  int b = gopts_.initial_bits;
  if (l < static_cast<int64_t>(table_.size()) && table_[static_cast<size_t>(l)].bits > 0) b = table_[static_cast<size_t>(l)].bits;
  if (measuring_ && l == exact_tensor_) return kPassThroughBits;  // its exact pass
  // A tensor kept in FP32 has no quantization noise to measure: quantized at 8 bits for the passes.
  return measuring_ && b == kPassThroughBits ? 8 : b;
}

SavedHandle GactStore::save(const Tensor& x, const SaveRequest& r) {
  // The requests the per-group store quantizes (its save's rule); the others go to it unchanged.
  const bool adaptive = (r.need == Need::Value || r.need == Need::Derivative) && is_f32_or_half(x.dtype()) &&
                        !r.exact && !(r.need == Need::Derivative && r.fn && r.fn->derivative_is_step);
  if (!adaptive) return GroupStore::save(x, r);
  int64_t l = -1;
  bool first = false;
  auto it = seen_.find(x.storage()->id);
  if (it != seen_.end() && it->second.second != x.version()) it = seen_.end();
  // A buffer decoded from a tensor of this step (a recompute's segment input), saved again: held
  // as that tensor's codes (compressing_store.h), so it is that tensor.
  if (it == seen_.end())
    if (const uint64_t source = decoded_from(x, r)) it = seen_.find(source);
  if (it != seen_.end()) {
    l = it->second.first;  // a buffer saved by two ops: held once, one tensor of the table
  } else {
    l = static_cast<int64_t>(step_.size());
    first = true;
    StepTensor t;
    t.layer = r.name;
    t.op = std::string(r.op);
    t.numel = x.numel();
    t.samples = leading_samples(x);
    t.bits = bits_to_save(l);
    t.recompute = recompute_serial();
    step_.push_back(std::move(t));
    seen_[x.storage()->id] = {l, x.version()};
  }
  StepTensor& t = step_[static_cast<size_t>(l)];
  SavedHandle h;
  if (t.bits == kPassThroughBits) {
    h = passthrough_.save(x, r);
    // Its exact pass. The baseline quantized it: its index is skipped, so later tensors keep their
    // noise. (A recompute loads it as this buffer, and the segment's first op saving it is this
    // tensor again, as the baseline's save of its decode was.)
    if (first && l == exact_tensor_) skip_index();
    if (first && gopts_.estimator == GactEstimator::Analytic) {
      // The group ranges the quantizer would have seen, for the sensitivity: the per-group codec
      // on x's device into scratch buffers there; only the per-group range terms come to the host
      // (1/128 of x's bytes), to be summed per sample.
      GroupQuantConfig cfg = options().quant;
      cfg.bits = 8;
      const GroupGeometry geo = group_geometry_of(x, cfg);
      std::vector<double> group_range_sq;  // (groups,)
      {
        const Tensor codes = Tensor::empty({geo.code_bytes()}, DType::u8, Layout::Plain, MemTag::Workspace, x.device());
        const Tensor meta = Tensor::empty({geo.meta_bytes()}, DType::u8, Layout::Plain, MemTag::Workspace, x.device());
        const CodecOrder order = codec_order(x, geo);
        quantize_groups(in_codec_order(x, order), geo, Rounding::Nearest, QuantNoise{0, 0}, codes, meta,
                        &group_range_sq, order.walk);
      }
      t.range_sq.assign(static_cast<size_t>(t.samples), 0.0);
      const int64_t per_sample = std::max<int64_t>(1, x.numel() / t.samples);
      for (int64_t g = 0; g < geo.groups(); ++g)
        t.range_sq[static_cast<size_t>(std::min(t.samples - 1, geo.group_start(g) / per_sample))] +=
            group_range_sq[static_cast<size_t>(g)];
    }
  } else {
    pending_bits_ = t.bits;
    const size_t before = step_tensors().size();
    h = GroupStore::save(x, r);
    if (step_tensors().size() > before) t.group_index = static_cast<int64_t>(before);
  }
  if (gopts_.estimator == GactEstimator::Analytic) {
    Consumer c;
    c.index = l;
    c.op = std::string(r.op);
    if (r.op == "conv2d" && x.rank() == 4) {
      c.input_pixels = x.dim(2) * x.dim(3);
      auto k = kernels_.find(r.name);
      if (k != kernels_.end()) c.kernel_elements = k->second;
      else if (unknown_kernel_.empty()) unknown_kernel_ = r.name.empty() ? "(unnamed)" : r.name;
    }
    consumers_[{h.store, h.id}] = std::move(c);
  }
  return h;
}

void GactStore::release(const SavedHandle& h) {
  consumers_.erase({h.store, h.id});
  GroupStore::release(h);
}

void GactStore::PassThrough::release(const SavedHandle& h) {
  owner_.consumers_.erase({h.store, h.id});
  Fp32Store::release(h);
}

void GactStore::PassThrough::note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) {
  owner_.note_consumer({h.store, h.id}, grad_outputs);
}

void GactStore::describe(std::vector<SavedRecord>& out) const {
  GroupStore::describe(out);
  passthrough_.describe(out);
}

size_t GactStore::live_count() const { return GroupStore::live_count() + passthrough_.live_count(); }

void GactStore::forget_step() {
  step_.clear();
  seen_.clear();
  consumers_.clear();
}

void GactStore::begin_step(int64_t step) {
  check_restored_step();
  if (gopts_.estimator == GactEstimator::Analytic) {
    std::vector<double> c = analytic_from_step();
    if (!c.empty()) {
      pending_analytic_ = std::move(c);
      sync_table();  // the finished step's sizes and names, before begin_step forgets them
    }
  }
  forget_step();
  GroupStore::begin_step(step);
}

void GactStore::note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) {
  note_consumer({h.store, h.id}, grad_outputs);
}

void GactStore::note_consumer(const HandleKey& k, const std::vector<Tensor>& grad_outputs) {
  if (gopts_.estimator != GactEstimator::Analytic || grad_outputs.empty() || !grad_outputs[0].defined()) return;
  auto it = consumers_.find(k);
  if (it == consumers_.end() || it->second.index >= static_cast<int64_t>(step_.size())) return;
  const Consumer& c = it->second;
  StepTensor& t = step_[static_cast<size_t>(c.index)];
  std::vector<double> g = sample_sq_norms(grad_outputs[0]);  // (N,)
  const double factor = analytic_jacobian_factor(c.op, grad_outputs[0], c.kernel_elements, c.input_pixels);
  for (double& v : g) v *= factor;
  if (static_cast<int64_t>(g.size()) != t.samples) {  // another batch layout: spread the total evenly
    double total = 0;
    for (double v : g) total += v;
    g.assign(static_cast<size_t>(t.samples), total / static_cast<double>(t.samples));
  }
  if (t.grad_sq.empty())
    t.grad_sq = std::move(g);
  else
    for (size_t i = 0; i < g.size(); ++i) t.grad_sq[i] += g[i];  // a tensor read by two ops
}

void GactStore::sync_table() {
  if (table_.size() < step_.size()) table_.resize(step_.size());
  std::map<uint64_t, int64_t> recomputes;  // recompute_serial() -> k, numbered as first seen in the step
  for (size_t l = 0; l < step_.size(); ++l) {
    TensorSensitivity& t = table_[l];
    t.index = static_cast<int64_t>(l);
    t.layer = step_[l].layer;
    t.op = step_[l].op;
    t.numel = step_[l].numel;
    if (t.bits == 0) t.bits = step_[l].bits;
    const uint64_t serial = step_[l].recompute;
    t.recomputed_in = serial == 0 ? 0 : recomputes.emplace(serial, static_cast<int64_t>(recomputes.size()) + 1).first->second;
  }
}

std::vector<double> GactStore::analytic_from_step() const {
  if (step_.empty()) return {};
  // Output-gradient terms per sample where the store saw them; elsewhere (a Value save whose
  // consumer's gradient was not observed) the mean per-sample term of the observed tensors.
  double sum = 0;
  int64_t count = 0;
  for (const auto& t : step_)
    for (double g : t.grad_sq) sum += g, ++count;
  if (count == 0) return {};  // no backward seen yet
  const double fallback = sum / static_cast<double>(count);
  const auto& quantized = step_tensors();
  std::vector<double> c(step_.size(), 0.0);
  for (size_t l = 0; l < step_.size(); ++l) {
    const StepTensor& t = step_[l];
    const std::vector<double>& range =
        t.group_index >= 0 ? quantized[static_cast<size_t>(t.group_index)].sample_range_sq : t.range_sq;
    double v = 0;
    for (size_t n = 0; n < range.size(); ++n) v += range[n] * (t.grad_sq.empty() ? fallback : t.grad_sq[n]);
    c[l] = v;
  }
  return c;
}

bool GactStore::refresh(int64_t step, const GradFn& compute_param_grads) {
  int64_t interval = gopts_.adapt_interval;
  if (gopts_.adapt_warmup && refreshes_ > 0 && refreshes_ <= 62)
    interval = std::min(interval, int64_t{1} << (refreshes_ - 1));  // 1, 2, 4, ... after the first
  const bool due = refreshes_ == 0 || step - last_refresh_step_ >= interval;
  if (!due) return false;
  if (gopts_.estimator == GactEstimator::Measured) {
    PACKRAT_CHECK(static_cast<bool>(compute_param_grads),
                  "gact: the measured estimator needs a function that computes the parameter gradients");
    estimate_measured(compute_param_grads);
  } else {
    estimate_analytic();
    if (table_.empty()) return false;  // nothing seen yet: try again next step
  }
  reallocate();
  last_refresh_step_ = step;
  ++refreshes_;
  if (!gopts_.log_path.empty()) write_csv(gopts_.log_path, refreshes_ > 1);
  return true;
}

}  // namespace packrat
