#include "quant/gact_policy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <queue>

#include "core/error.h"

namespace packrat {

void GactOptions::check(std::string_view where) const {
  store.quant.check(where);
  PACKRAT_CHECK(!candidate_bits.empty(), "{}: GACT needs at least one candidate bit-width", where);
  for (int b : candidate_bits)
    PACKRAT_CHECK(group_bits_supported(b), "{}: GACT candidate bit-width {} is not one of 1, 2, 3, 4, 8", where, b);
  const int lowest = *std::min_element(candidate_bits.begin(), candidate_bits.end());
  PACKRAT_CHECK(avg_bits >= lowest && avg_bits >= 1.0,
                "{}: 'avg_bits' is {}; the budget must be at least {} bit per element", where, avg_bits, lowest);
  PACKRAT_CHECK(adapt_interval >= 1, "{}: 'adapt_interval' must be at least 1, got {}", where, adapt_interval);
  PACKRAT_CHECK(tensors_per_refresh >= 0, "{}: 'tensors_per_refresh' must be >= 0, got {}", where, tensors_per_refresh);
  PACKRAT_CHECK(initial_bits == 0 || group_bits_supported(initial_bits),
                "{}: 'initial_bits' is {}, must be 1, 2, 3, 4 or 8", where, initial_bits);
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
  g.initial_bits = static_cast<int>(o.get_int("initial_bits", base.initial_bits, 0, 8));
  g.warn_ratio = o.get_double("warn_ratio", base.warn_ratio, 0.0, 1e9);
  g.log_path = o.get_string("log_path", base.log_path, {});
  // The per-group store's keys except bits (GACT chooses them).
  const int bits = base.store.quant.bits;
  g.store = GroupStore::parse_options(o, base.store);
  PACKRAT_CHECK(g.store.quant.bits == bits, "{}: 'bits' does not apply to gact (it chooses the bits per tensor); "
                "set 'avg_bits' or 'initial_bits'", o.where());
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

int GactStore::bits_for(int64_t index, const SaveRequest&, const Tensor&) {
  if (index < static_cast<int64_t>(table_.size()) && table_[static_cast<size_t>(index)].bits > 0)
    return table_[static_cast<size_t>(index)].bits;
  return gopts_.initial_bits;
}

void GactStore::begin_step(int64_t step) {
  if (gopts_.estimator == GactEstimator::Analytic) {
    std::vector<double> c = analytic_from_step();
    if (!c.empty()) pending_analytic_ = std::move(c);
  }
  GroupStore::begin_step(step);
}

void GactStore::note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) {
  if (gopts_.estimator == GactEstimator::Analytic && !grad_outputs.empty() && grad_outputs[0].defined())
    note_grad_output(h, grad_outputs[0]);
}

void GactStore::sync_table() {
  const auto& st = step_tensors();
  if (table_.size() < st.size()) table_.resize(st.size());
  for (const auto& info : st) {
    TensorSensitivity& t = table_[static_cast<size_t>(info.index)];
    t.index = info.index;
    t.layer = info.layer;
    t.op = info.op;
    t.numel = info.numel;
    if (t.bits == 0) t.bits = info.bits;
  }
}

std::vector<double> GactStore::analytic_from_step() const {
  const auto& st = step_tensors();
  if (st.empty()) return {};
  // Output-gradient norms per sample where the store saw them; elsewhere (a Value save whose
  // consumer's gradient was not observed) the mean per-sample norm of the observed tensors.
  double sum = 0;
  int64_t count = 0;
  for (const auto& info : st)
    for (double g : info.sample_grad_sq) sum += g, ++count;
  if (count == 0) return {};  // no backward seen yet
  const double fallback = sum / static_cast<double>(count);
  std::vector<double> c(st.size(), 0.0);
  for (const auto& info : st) {
    double v = 0;
    for (size_t n = 0; n < info.sample_range_sq.size(); ++n)
      v += info.sample_range_sq[n] * (info.sample_grad_sq.empty() ? fallback : info.sample_grad_sq[n]);
    c[static_cast<size_t>(info.index)] = v;
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

double squared_distance(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  PACKRAT_CHECK(a.size() == b.size(), "gact: the gradient function returned {} then {} gradients", a.size(), b.size());
  double d = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!a[k].defined() || !b[k].defined()) continue;
    PACKRAT_CHECK(a[k].numel() == b[k].numel(), "gact: gradient {} changed size between evaluations", k);
    const std::vector<float> x = a[k].to_vector(), y = b[k].to_vector();
    for (size_t i = 0; i < x.size(); ++i) d += static_cast<double>(x[i] - y[i]) * (x[i] - y[i]);
  }
  return d;
}

}  // namespace

void GactStore::estimate_measured(const GradFn& fn) {
  const int64_t now = step();
  clear_noise_salts();
  GroupStore::begin_step(now);
  const std::vector<Tensor> g0 = fn();  // baseline, shared by every tensor's pair
  int64_t passes = 1;
  sync_table();
  observe_gradient(g0);
  const int64_t L = static_cast<int64_t>(step_tensors().size());
  std::vector<int> pass_bits(static_cast<size_t>(L));
  for (const auto& info : step_tensors()) pass_bits[static_cast<size_t>(info.index)] = info.bits;
  const int64_t k = gopts_.tensors_per_refresh > 0 ? std::min(gopts_.tensors_per_refresh, L) : L;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t l = (round_robin_ + j) % std::max<int64_t>(L, 1);
    set_noise_salt(l, ++salt_counter_);  // only tensor l's noise changes
    GroupStore::begin_step(now);
    const std::vector<Tensor> gl = fn();
    ++passes;
    set_noise_salt(l, 0);
    const double d = squared_distance(g0, gl);
    TensorSensitivity& t = table_[static_cast<size_t>(l)];
    t.sensitivity = d / (2.0 * quant_variance_factor(pass_bits[static_cast<size_t>(l)]));
    t.estimated = true;
  }
  if (L > 0) round_robin_ = (round_robin_ + k) % L;
  GroupStore::begin_step(now);
  last_passes_ = passes;
}

void GactStore::estimate_analytic() {
  std::vector<double> c = analytic_from_step();
  if (c.empty()) c = pending_analytic_;
  if (c.empty()) return;
  if (!step_tensors().empty()) sync_table();
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
  warned_ = std::isfinite(sampling) && predicted > gopts_.warn_ratio * sampling;
  if (warned_)
    spdlog::warn("gact: the predicted quantization variance of the gradient ({:.4g}) exceeds {} of its sampling "
                 "variance ({:.4g}) at {:.2f} bits per element on average; raise avg_bits",
                 predicted, gopts_.warn_ratio, sampling, average_bits());
}

void GactStore::observe_gradient(const std::vector<Tensor>& grads) {
  int64_t P = 0;
  for (const auto& g : grads)
    if (g.defined()) P += g.numel();
  if (!grad_mean_.defined() || grad_mean_.numel() != P) {
    TagScope tag(MemTag::OptimizerState);
    grad_mean_ = Tensor::zeros({P});  // (P,) running mean of the flattened gradient
    grad_count_ = 0;
    grad_m2_ = 0;
  }
  float* mean = grad_mean_.data<float>();
  ++grad_count_;
  int64_t off = 0;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    const std::vector<float> v = g.to_vector();
    for (size_t i = 0; i < v.size(); ++i, ++off) {
      const double old = mean[off];
      const double next = old + (v[i] - old) / static_cast<double>(grad_count_);
      grad_m2_ += (v[i] - old) * (v[i] - next);
      mean[off] = static_cast<float>(next);
    }
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

}  // namespace packrat
