#include "quant/gact_policy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <cstring>
#include <map>
#include <queue>
#include <set>

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

std::vector<int> allocate_bits(const std::vector<double>& sensitivity, const std::vector<int64_t>& numel,
                               double avg_bits, const std::vector<int>& candidates_in) {
  PACKRAT_CHECK(sensitivity.size() == numel.size(), "allocate_bits: {} sensitivities for {} tensors",
                sensitivity.size(), numel.size());
  std::vector<int> cand = candidates_in;
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  PACKRAT_CHECK(!cand.empty(), "allocate_bits: no candidate bit-widths");
  const size_t L = numel.size();
  std::vector<size_t> level(L, 0);  // index into cand
  double total = 0, used = 0;
  for (size_t l = 0; l < L; ++l) {
    total += static_cast<double>(numel[l]);
    used += static_cast<double>(numel[l]) * cand[0];
  }
  const double budget = avg_bits * total;
  PACKRAT_CHECK(used <= budget * (1 + 1e-12), "allocate_bits: a budget of {} bits per element is below the smallest "
                "candidate ({} bits)", avg_bits, cand[0]);
  struct Upgrade {
    double gain_per_bit;
    size_t l;
    bool operator<(const Upgrade& o) const { return gain_per_bit < o.gain_per_bit || (gain_per_bit == o.gain_per_bit && l > o.l); }
  };
  std::priority_queue<Upgrade> queue;
  auto push = [&](size_t l) {
    if (level[l] + 1 >= cand.size() || numel[l] == 0) return;
    const int b = cand[level[l]], nb = cand[level[l] + 1];
    const double gain = std::max(0.0, sensitivity[l]) * (quant_variance_factor(b) - quant_variance_factor(nb));
    queue.push({gain / (static_cast<double>(numel[l]) * (nb - b)), l});
  };
  for (size_t l = 0; l < L; ++l) push(l);
  while (!queue.empty()) {
    const Upgrade u = queue.top();
    queue.pop();
    const size_t l = u.l;
    const double cost = static_cast<double>(numel[l]) * (cand[level[l] + 1] - cand[level[l]]);
    if (used + cost > budget * (1 + 1e-12)) continue;  // does not fit; larger jumps would not either
    used += cost;
    ++level[l];
    push(l);
  }
  std::vector<int> bits(L);
  for (size_t l = 0; l < L; ++l) bits[l] = cand[level[l]];
  return bits;
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
  const std::string est = o.get_string("estimator", base.estimator == GactEstimator::Measured ? "measured" : "analytic",
                                       {"measured", "analytic"});
  g.estimator = est == "measured" ? GactEstimator::Measured : GactEstimator::Analytic;
  g.tensors_per_refresh = o.get_int("tensors_per_refresh", base.tensors_per_refresh, 0, INT64_MAX);
  g.initial_bits = static_cast<int>(o.get_int("initial_bits", base.initial_bits, 0, kPassThroughBits));
  g.warn_ratio = o.get_double("warn_ratio", base.warn_ratio, 0.0, 1e9);
  g.log_path = o.get_string("log_path", base.log_path, {});
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

double analytic_jacobian_factor(std::string_view op, const Tensor& grad_out, int64_t kernel_elements,
                                int64_t input_pixels) {
  if (op == "conv2d" && kernel_elements > 0 && input_pixels > 0)
    return static_cast<double>(kernel_elements) / static_cast<double>(input_pixels);
  return jacobian_factor(op == "conv2d" ? std::string_view() : op, grad_out);  // no kernel: per element
}

std::vector<double> sample_sq_norms(const Tensor& t) {
  if (t.is_cpu()) return per_sample_sq_norms(t);
  PACKRAT_CHECK(t.dtype() == DType::f32, "gact: per-sample gradient norms of {}: expected f32", t.describe());
  const int64_t n = t.rank() >= 2 ? t.dim(0) : 1;
  std::vector<double> out(static_cast<size_t>(n), 0.0);  // (N,)
  if (t.numel() == 0) return out;
  TagScope tag(MemTag::Workspace);
  Backend& be = backend(t.device());
  const Tensor rows = t.to_plain().reshape({n, t.numel() / n});  // (N, elements per sample)
  const Tensor sums = be.reduce_sum_to(be.binary(BinaryOp::Mul, rows, rows), Shape{n, 1}).to(Device::cpu());  // (N, 1)
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(sums.data<float>()[i]);
  return out;
}

std::map<std::string, int64_t> conv_kernel_elements(const std::vector<std::pair<std::string, Tensor>>& named_parameters) {
  static const std::string suffix = ".weight";
  std::map<std::string, int64_t> out;
  for (const auto& [name, p] : named_parameters)
    if (p.rank() == 4 && name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out[name.substr(0, name.size() - suffix.size())] = p.dim(2) * p.dim(3);
  return out;
}

int GactStore::bits_for(int64_t, const SaveRequest&, const Tensor&) { return pending_bits_; }

int GactStore::bits_to_save(int64_t l) const {
  int b = gopts_.initial_bits;
  if (l < static_cast<int64_t>(table_.size()) && table_[static_cast<size_t>(l)].bits > 0) b = table_[static_cast<size_t>(l)].bits;
  // A tensor kept in FP32 has no quantization noise to measure: quantized at 8 bits for the passes.
  return measuring_ && b == kPassThroughBits ? 8 : b;
}

SavedHandle GactStore::save(const Tensor& x, const SaveRequest& r) {
  // The requests the per-group store quantizes (its save's rule); the others go to it unchanged.
  const bool adaptive = (r.need == Need::Value || r.need == Need::Derivative) && x.dtype() == DType::f32 && !r.exact &&
                        !(r.need == Need::Derivative && r.fn && r.fn->derivative_is_step);
  if (!adaptive) return GroupStore::save(x, r);
  int64_t l = -1;
  bool first = false;
  if (auto it = seen_.find(x.storage()->id); it != seen_.end() && it->second.second == x.version()) {
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
    step_.push_back(std::move(t));
    seen_[x.storage()->id] = {l, x.version()};
  }
  StepTensor& t = step_[static_cast<size_t>(l)];
  SavedHandle h;
  if (t.bits == kPassThroughBits) {
    h = passthrough_.save(x, r);
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
  for (size_t l = 0; l < step_.size(); ++l) {
    TensorSensitivity& t = table_[l];
    t.index = static_cast<int64_t>(l);
    t.layer = step_[l].layer;
    t.op = step_[l].op;
    t.numel = step_[l].numel;
    if (t.bits == 0) t.bits = step_[l].bits;
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

bool GactStore::iterate(int64_t step, const GradFn& compute_param_grads) {
  const bool due = refreshes_ == 0 || step - last_refresh_step_ >= gopts_.adapt_interval;
  if (!due) return false;
  const auto t0 = std::chrono::steady_clock::now();
  if (gopts_.estimator == GactEstimator::Measured) {
    PACKRAT_CHECK(static_cast<bool>(compute_param_grads),
                  "gact: the measured estimator needs a function that computes the parameter gradients");
    estimate_measured(compute_param_grads);
  } else {
    estimate_analytic();
    if (table_.empty()) return false;  // nothing seen yet: try again next step
  }
  reallocate();
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_refresh_step_ = step;
  ++refreshes_;
  if (!gopts_.log_path.empty()) write_csv(gopts_.log_path, refreshes_ > 1);
  return true;
}

namespace {

// ||a - b||^2 over every gradient, on the gradients' device (one double per gradient comes to
// the host): the difference in f32, its squares summed in double.
double squared_distance(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  PACKRAT_CHECK(a.size() == b.size(), "gact: the gradient function returned {} then {} gradients", a.size(), b.size());
  TagScope tag(MemTag::Workspace);
  double d = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!a[k].defined() || !b[k].defined()) continue;
    PACKRAT_CHECK(a[k].shape() == b[k].shape(), "gact: gradient {} changed shape between evaluations ({} then {})", k,
                  a[k].shape().str(), b[k].shape().str());
    check_same_device("gact (measured estimator): gradients of two evaluations", {&a[k], &b[k]});
    Backend& be = backend(a[k].device());
    d += be.reduce_sum_squares(be.binary(BinaryOp::Sub, a[k], b[k]));
  }
  return d;
}

}  // namespace

void GactStore::estimate_measured(const GradFn& fn) {
  const int64_t now = step();
  auto restart = [&] {  // a pass starts its step over: same step, same tensor numbering
    forget_step();
    GroupStore::begin_step(now);
  };
  clear_noise_salts();
  measuring_ = true;
  restart();
  std::vector<Tensor> g0;
  try {
    g0 = fn();  // baseline, shared by every tensor's pair
  } catch (...) {
    measuring_ = false;
    throw;
  }
  int64_t passes = 1;
  check_restored_step();
  sync_table();
  const int64_t L = static_cast<int64_t>(step_.size());
  std::vector<int> pass_bits(static_cast<size_t>(L));
  std::vector<int64_t> group_index(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    pass_bits[static_cast<size_t>(l)] = step_[static_cast<size_t>(l)].bits;
    group_index[static_cast<size_t>(l)] = step_[static_cast<size_t>(l)].group_index;
  }
  const int64_t k = gopts_.tensors_per_refresh > 0 ? std::min(gopts_.tensors_per_refresh, L) : L;
  try {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t l = (round_robin_ + j) % std::max<int64_t>(L, 1);
      const int64_t gi = group_index[static_cast<size_t>(l)];
      set_noise_salt(gi, ++salt_counter_);  // only tensor l's noise changes
      restart();
      const std::vector<Tensor> gl = fn();
      ++passes;
      set_noise_salt(gi, 0);
      const double d = squared_distance(g0, gl);
      TensorSensitivity& t = table_[static_cast<size_t>(l)];
      t.sensitivity = d / (2.0 * quant_variance_factor(pass_bits[static_cast<size_t>(l)]));
      t.estimated = true;
    }
  } catch (...) {
    measuring_ = false;
    throw;
  }
  measuring_ = false;
  if (L > 0) round_robin_ = (round_robin_ + k) % L;
  restart();
  last_passes_ = passes;
}

void GactStore::estimate_analytic() {
  PACKRAT_CHECK(unknown_kernel_.empty(),
                "gact (analytic estimator): the kernel size of conv2d layer '{}' is unknown; the estimate scales a "
                "convolution's input by KH*KW / (H*W): give the kernels with GactStore::set_conv_kernels "
                "(the trainer does, from the model's parameters)", unknown_kernel_);
  std::vector<double> c = analytic_from_step();
  if (c.empty()) c = pending_analytic_;
  if (c.empty()) return;
  if (!step_.empty()) sync_table();
  if (table_.size() < c.size()) table_.resize(c.size());
  for (size_t l = 0; l < c.size(); ++l) {
    table_[l].index = static_cast<int64_t>(l);
    table_[l].sensitivity = c[l];
    table_[l].estimated = true;
  }
  last_passes_ = 0;
}

void GactStore::reallocate() {
  std::vector<double> c;
  std::vector<int64_t> numel;
  for (const auto& t : table_) {
    c.push_back(t.sensitivity);
    numel.push_back(t.numel);
  }
  const std::vector<int> bits = allocate_bits(c, numel, gopts_.avg_bits, gopts_.candidate_bits);
  for (size_t l = 0; l < table_.size(); ++l) table_[l].bits = bits[l];
  const double predicted = predicted_variance(), sampling = sampling_variance();
  const bool was_warned = warned_;
  warned_ = std::isfinite(sampling) && predicted > gopts_.warn_ratio * sampling;
  if (warned_ && !was_warned)  // once when it starts, not at every refresh
    spdlog::warn("gact: the predicted quantization variance of the gradient ({:.4g}) exceeds {} of its sampling "
                 "variance ({:.4g}) at {:.2f} bits per element on average; raise avg_bits",
                 predicted, gopts_.warn_ratio, sampling, average_bits());
}

void GactStore::observe_gradient(const std::vector<Tensor>& grads) {
  int64_t P = 0;
  const Tensor* first = nullptr;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    PACKRAT_CHECK(g.dtype() == DType::f32, "gact: observe_gradient takes f32 gradients, got {}", g.describe());
    if (first) check_same_device("gact: observe_gradient", {first, &g});
    first = first ? first : &g;
    P += g.numel();
  }
  if (!first) return;
  const Device device = first->device();
  Backend& be = backend(device);
  if (!grad_mean_.defined() || grad_mean_.numel() != P) {
    // (P,) running mean of the flattened gradient, on the gradients' device.
    grad_mean_ = Tensor::empty({P}, DType::f32, Layout::Plain, MemTag::OptimizerState, device);
    be.fill(grad_mean_, 0.0);
    grad_count_ = 0;
    grad_m2_ = 0;
  } else if (grad_mean_.device() != device) {  // restored from a checkpoint (host), or the run moved
    TagScope keep(MemTag::OptimizerState);
    grad_mean_ = grad_mean_.to(device);
  }
  ++grad_count_;
  // Welford per element, on the device: delta = g - mean, mean += delta / count,
  // m2 += sum delta * (g - new mean) (the sum in double; one double per gradient to the host).
  TagScope tag(MemTag::Workspace);
  const double inv_count = 1.0 / static_cast<double>(grad_count_);
  int64_t off = 0;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    const int64_t n = g.numel();
    const Tensor v = g.to_plain().reshape({n});  // (n,) logical order
    Tensor mean = Tensor::empty({n}, DType::f32, Layout::Plain, MemTag::Workspace, device);  // (n,) its slice of the mean
    be.copy_range(grad_mean_, off, mean, 0, n);
    const Tensor delta = be.binary(BinaryOp::Sub, v, mean);
    const Tensor next = be.binary(BinaryOp::Add, mean, be.scale(delta, inv_count));
    grad_m2_ += be.reduce_sum(be.binary(BinaryOp::Mul, delta, be.binary(BinaryOp::Sub, v, next)));
    be.copy_range(next, 0, grad_mean_, off, n);
    off += n;
  }
}

double GactStore::sampling_variance() const {
  return grad_count_ >= 2 ? grad_m2_ / static_cast<double>(grad_count_ - 1) : std::numeric_limits<double>::quiet_NaN();
}

double GactStore::predicted_variance() const {
  double v = 0;
  for (const auto& t : table_)
    if (t.bits > 0) v += t.sensitivity * quant_variance_factor(t.bits);
  return v;
}

double GactStore::average_bits() const {
  double bits = 0, n = 0;
  for (const auto& t : table_) {
    bits += static_cast<double>(t.bits) * static_cast<double>(t.numel);
    n += static_cast<double>(t.numel);
  }
  return n > 0 ? bits / n : 0.0;
}

void GactStore::write_csv(const std::string& path, bool append) const {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  PACKRAT_CHECK(out.good(), "gact: cannot write the sensitivity log '{}'", path);
  if (!append) out << "step,index,layer,op,numel,sensitivity,bits\n";
  for (const auto& t : table_)
    out << last_refresh_step_ << ',' << t.index << ',' << t.layer << ',' << t.op << ',' << t.numel << ','
        << fmt::format("{:.6g}", t.sensitivity) << ',' << t.bits << '\n';
}

namespace {

Tensor state_tensor(int64_t n, DType dtype) {  // host-side state, whatever the run's device
  return Tensor::empty(Shape{n}, dtype, Layout::Plain, MemTag::Workspace, Device::cpu());
}

Tensor i64_scalar(int64_t v) {
  Tensor t = state_tensor(1, DType::i64);
  t.data<int64_t>()[0] = v;
  return t;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> GactStore::export_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const int64_t L = static_cast<int64_t>(table_.size());
  out.emplace_back("tensors", i64_scalar(L));
  if (L > 0) {
    Tensor c = state_tensor(L, DType::f64), bits = state_tensor(L, DType::i32), numel = state_tensor(L, DType::i64),
           est = state_tensor(L, DType::u8);
    std::string names;
    for (int64_t l = 0; l < L; ++l) {
      const TensorSensitivity& t = table_[static_cast<size_t>(l)];
      c.data<double>()[l] = t.sensitivity;
      bits.data<int32_t>()[l] = t.bits;
      numel.data<int64_t>()[l] = t.numel;
      est.data<uint8_t>()[l] = t.estimated ? 1 : 0;
      names += t.layer + '\t' + t.op + '\n';
    }
    Tensor n = state_tensor(static_cast<int64_t>(names.size()), DType::u8);
    std::memcpy(n.raw(), names.data(), names.size());
    out.emplace_back("sensitivity", c);
    out.emplace_back("bits", bits);
    out.emplace_back("numel", numel);
    out.emplace_back("estimated", est);
    out.emplace_back("names", n);
  }
  out.emplace_back("last_refresh_step", i64_scalar(last_refresh_step_));
  out.emplace_back("refreshes", i64_scalar(refreshes_));
  out.emplace_back("round_robin", i64_scalar(round_robin_));
  out.emplace_back("salt_counter", i64_scalar(static_cast<int64_t>(salt_counter_)));
  out.emplace_back("last_passes", i64_scalar(last_passes_));
  out.emplace_back("warned", i64_scalar(warned_ ? 1 : 0));
  out.emplace_back("grad_count", i64_scalar(grad_count_));
  Tensor m2 = state_tensor(1, DType::f64);
  m2.data<double>()[0] = grad_m2_;
  out.emplace_back("grad_m2", m2);
  if (grad_mean_.defined() && grad_mean_.numel() > 0) {
    Tensor mean = state_tensor(grad_mean_.numel(), DType::f32);
    const Tensor host = grad_mean_.to(Device::cpu());  // the exact bytes, from the gradients' device
    std::memcpy(mean.raw(), host.raw(), mean.nbytes());
    out.emplace_back("grad_mean", mean);
  }
  // What begin_step would take from the step that finished last (analytic estimator).
  if (gopts_.estimator == GactEstimator::Analytic) {
    std::vector<double> pending = analytic_from_step();
    if (pending.empty()) pending = pending_analytic_;
    if (!pending.empty()) {
      Tensor p = state_tensor(static_cast<int64_t>(pending.size()), DType::f64);
      std::memcpy(p.raw(), pending.data(), pending.size() * sizeof(double));
      out.emplace_back("pending_analytic", p);
    }
  }
  return out;
}

void GactStore::import_state(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& where) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : state) by_name[n] = &t;
  static const std::set<std::string> known = {
      "tensors",     "sensitivity",  "bits",        "numel",      "estimated", "names",   "last_refresh_step",
      "refreshes",   "round_robin",  "salt_counter", "last_passes", "warned",   "grad_count", "grad_m2",
      "grad_mean",   "pending_analytic"};
  for (const auto& [n, t] : by_name)
    PACKRAT_CHECK(known.count(n), "{}: unknown GACT state entry '{}'", where, n);
  // An entry of this dtype with n elements (n < 0: any); null when absent and optional.
  auto get = [&](const std::string& name, DType dtype, int64_t n, bool required) -> const Tensor* {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      PACKRAT_CHECK(!required, "{}: the GACT state has no '{}'", where, name);
      return nullptr;
    }
    const Tensor& t = *it->second;
    PACKRAT_CHECK(t.dtype() == dtype && (n < 0 || t.numel() == n),
                  "{}: GACT state '{}' is {} with {} elements, expected {}{}", where, name, dtype_name(t.dtype()),
                  t.numel(), dtype_name(dtype), n < 0 ? std::string() : fmt::format(" with {}", n));
    return &t;
  };
  auto i64 = [&](const std::string& name) { return get(name, DType::i64, 1, true)->to_plain().data<int64_t>()[0]; };

  const int64_t L = i64("tensors");
  PACKRAT_CHECK(L >= 0, "{}: GACT state 'tensors' is {}", where, L);
  std::vector<TensorSensitivity> table(static_cast<size_t>(L));
  if (L > 0) {
    const Tensor c = get("sensitivity", DType::f64, L, true)->to_plain();
    const Tensor bits = get("bits", DType::i32, L, true)->to_plain();
    const Tensor numel = get("numel", DType::i64, L, true)->to_plain();
    const Tensor est = get("estimated", DType::u8, L, true)->to_plain();
    const Tensor names = get("names", DType::u8, -1, true)->to_plain();
    const std::string text(reinterpret_cast<const char*>(names.raw()), static_cast<size_t>(names.nbytes()));
    size_t pos = 0;
    for (int64_t l = 0; l < L; ++l) {
      TensorSensitivity& t = table[static_cast<size_t>(l)];
      t.index = l;
      t.sensitivity = c.data<double>()[l];
      t.bits = bits.data<int32_t>()[l];
      t.numel = numel.data<int64_t>()[l];
      t.estimated = est.data<uint8_t>()[l] != 0;
      PACKRAT_CHECK(t.bits == 0 || std::find(gopts_.candidate_bits.begin(), gopts_.candidate_bits.end(), t.bits) !=
                                       gopts_.candidate_bits.end(),
                    "{}: GACT tensor {} has {} bits in the checkpoint, not a candidate of this store", where, l, t.bits);
      const size_t tab = text.find('\t', pos), nl = text.find('\n', pos);
      PACKRAT_CHECK(tab != std::string::npos && nl != std::string::npos && tab < nl,
                    "{}: GACT state 'names' has no layer and op for tensor {}", where, l);
      t.layer = text.substr(pos, tab - pos);
      t.op = text.substr(tab + 1, nl - tab - 1);
      pos = nl + 1;
    }
    PACKRAT_CHECK(pos == text.size(), "{}: GACT state 'names' names more than {} tensors", where, L);
  } else {
    for (const char* n : {"sensitivity", "bits", "numel", "estimated", "names"})
      PACKRAT_CHECK(!by_name.count(n), "{}: GACT state has '{}' but no tensors", where, n);
  }
  const int64_t last_refresh = i64("last_refresh_step"), refreshes = i64("refreshes"), rr = i64("round_robin"),
                salt = i64("salt_counter"), passes = i64("last_passes"), warned = i64("warned"),
                count = i64("grad_count");
  PACKRAT_CHECK(refreshes >= 0 && count >= 0 && rr >= 0 && (L == 0 || rr < L),
                "{}: GACT state is inconsistent (refreshes {}, grad_count {}, round_robin {} of {} tensors)", where,
                refreshes, count, rr, L);
  const double m2 = get("grad_m2", DType::f64, 1, true)->to_plain().data<double>()[0];
  const Tensor* mean = get("grad_mean", DType::f32, -1, false);
  PACKRAT_CHECK(count == 0 || mean != nullptr, "{}: GACT state has grad_count {} but no grad_mean", where, count);
  const Tensor* pending = get("pending_analytic", DType::f64, -1, false);

  table_ = std::move(table);
  last_refresh_step_ = last_refresh;
  refreshes_ = refreshes;
  round_robin_ = rr;
  salt_counter_ = static_cast<uint64_t>(salt);
  last_passes_ = passes;
  last_seconds_ = 0;
  warned_ = warned != 0;
  grad_count_ = count;
  grad_m2_ = m2;
  grad_mean_ = Tensor();
  if (mean) {
    grad_mean_ = Tensor::empty({mean->numel()}, DType::f32, Layout::Plain, MemTag::OptimizerState, Device::cpu());  // (P,)
    const Tensor m = mean->to_plain().to(Device::cpu());
    std::memcpy(grad_mean_.raw(), m.raw(), grad_mean_.nbytes());
  }
  pending_analytic_.clear();
  if (pending) {
    const Tensor p = pending->to_plain().to(Device::cpu());
    pending_analytic_.assign(p.data<double>(), p.data<double>() + p.numel());
  }
  restored_from_ = L > 0 ? where : std::string();
}

void GactStore::check_restored_step() {
  if (restored_from_.empty()) return;
  if (step_.empty()) return;
  const std::string where = std::move(restored_from_);
  restored_from_.clear();
  PACKRAT_CHECK(step_.size() == table_.size(),
                "{}: the checkpoint's GACT store has {} quantized tensors, but this config quantizes {} with it "
                "(the saved_tensors config or the model differs from the checkpointed run's)",
                where, table_.size(), step_.size());
  for (size_t l = 0; l < step_.size(); ++l) {
    const TensorSensitivity& t = table_[l];
    // (A table the analytic estimator filled between steps has no names: nothing to compare.)
    PACKRAT_CHECK(t.op.empty() || (t.layer == step_[l].layer && t.op == step_[l].op),
                  "{}: GACT tensor {} is {} '{}' in the checkpoint but {} '{}' in this config", where, l, t.op,
                  t.layer, step_[l].op, step_[l].layer);
  }
}

}  // namespace packrat
