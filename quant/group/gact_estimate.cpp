// GACT's sensitivity estimators (measured and analytic), the greedy bit allocation over them,
// and the sampling variance the compression-variance warning compares against (gact_store.h).
#include "quant/group/gact_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <queue>
#include <utility>

#include "core/backend.h"
#include "core/error.h"

namespace packrat {

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

namespace {

// A gradient's rows (GactVariance): (first dimension, the rest), a vector one row.
Shape row_shape(const Tensor& g) {
  const int64_t rows = g.rank() >= 2 ? g.dim(0) : 1;
  return Shape{rows, g.numel() / rows};
}
Tensor as_rows(const Tensor& g) { return g.to_plain().reshape(row_shape(g)); }  // plain

// Per row of a (rows, rest) tensor: the sum of its elements, on its device; the sums to the host.
std::vector<double> row_sums(Backend& be, const Tensor& t) {
  const int64_t rows = t.dim(0);
  const Tensor sums = be.reduce_sum_to(t, Shape{rows, 1}).to(Device::cpu());  // (rows, 1)
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = static_cast<double>(sums.data<float>()[r]);
  return out;
}

// Per row: sum of a * b.
std::vector<double> row_dots(Backend& be, const Tensor& a, const Tensor& b) {
  return row_sums(be, be.binary(BinaryOp::Mul, a, b));
}

// ||a - b||^2 over every gradient (absolute), or the sum over rows of ||a_row - b_row||^2 /
// ||a_row||^2, rows with a zero gradient left out (relative), on the gradients' device: the
// difference in f32, its squares summed in double (per row: in f32, then double).
double squared_distance(const std::vector<Tensor>& a, const std::vector<Tensor>& b, bool relative) {
  PACKRAT_CHECK(a.size() == b.size(), "gact: the gradient function returned {} then {} gradients", a.size(), b.size());
  TagScope tag(MemTag::Workspace);
  double d = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!a[k].defined() || !b[k].defined()) continue;
    PACKRAT_CHECK(a[k].shape() == b[k].shape(), "gact: gradient {} changed shape between evaluations ({} then {})", k,
                  a[k].shape().str(), b[k].shape().str());
    check_same_device("gact (measured estimator): gradients of two evaluations", {&a[k], &b[k]});
    Backend& be = backend(a[k].device());
    if (!relative) {
      d += be.reduce_sum_squares(be.binary(BinaryOp::Sub, a[k], b[k]));
      continue;
    }
    const Tensor x = as_rows(a[k]);  // (rows, rest)
    const Tensor diff = be.binary(BinaryOp::Sub, x, as_rows(b[k]));
    const std::vector<double> dd = row_dots(be, diff, diff), norm = row_dots(be, x, x);
    for (size_t r = 0; r < dd.size(); ++r)
      if (norm[r] > 0) d += dd[r] / norm[r];
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
  std::vector<bool> against_exact(static_cast<size_t>(L));  // a segment input's pass holds it exact (gact_store.h)
  for (int64_t l = 0; l < L; ++l) {
    const StepTensor& t = step_[static_cast<size_t>(l)];
    pass_bits[static_cast<size_t>(l)] = t.bits;
    group_index[static_cast<size_t>(l)] = t.group_index;
    against_exact[static_cast<size_t>(l)] = t.op == "checkpoint";
  }
  const int64_t k = gopts_.tensors_per_refresh > 0 ? std::min(gopts_.tensors_per_refresh, L) : L;
  std::vector<int64_t> measure;  // the tensors this refresh runs passes for
  last_adopted_ = 0;
  const KnownSensitivities known = std::exchange(adopted_, {});
  if (k == L && !known.empty()) {
    const std::vector<TensorName> names = table_names();
    for (int64_t l = 0; l < L; ++l) {
      const auto it = known.find(names[static_cast<size_t>(l)]);
      if (it == known.end()) {
        measure.push_back(l);
        continue;
      }
      table_[static_cast<size_t>(l)].sensitivity = it->second;
      table_[static_cast<size_t>(l)].estimated = true;
      ++last_adopted_;
    }
  } else {
    for (int64_t j = 0; j < k; ++j) measure.push_back((round_robin_ + j) % L);
  }
  try {
    for (const int64_t l : measure) {
      const int64_t gi = group_index[static_cast<size_t>(l)];
      const bool exact = against_exact[static_cast<size_t>(l)];
      if (exact) exact_tensor_ = l;
      else set_noise_salt(gi, ++salt_counter_);  // only tensor l's noise changes
      restart();
      const std::vector<Tensor> gl = fn();
      ++passes;
      exact_tensor_ = -1;
      set_noise_salt(gi, 0);
      const double d = squared_distance(g0, gl, relative_variance());
      TensorSensitivity& t = table_[static_cast<size_t>(l)];
      t.sensitivity = d / ((exact ? 1.0 : 2.0) * quant_variance_factor(pass_bits[static_cast<size_t>(l)]));
      t.estimated = true;
    }
  } catch (...) {
    measuring_ = false;
    exact_tensor_ = -1;
    throw;
  }
  measuring_ = false;
  if (L > 0) round_robin_ = (round_robin_ + k) % L;
  restart();
  last_passes_ = passes;
}

std::vector<TensorName> GactStore::table_names() const {
  std::map<std::pair<std::string, std::string>, int64_t> seen;  // (layer, op) -> tensors so far
  std::vector<TensorName> out;
  out.reserve(table_.size());
  for (const TensorSensitivity& t : table_) out.push_back({t.layer, t.op, seen[{t.layer, t.op}]++});
  return out;
}

KnownSensitivities GactStore::measured_sensitivities() const {
  const std::vector<TensorName> names = table_names();
  KnownSensitivities out;
  for (size_t l = 0; l < table_.size(); ++l)
    if (table_[l].estimated) out.emplace(names[l], table_[l].sensitivity);
  return out;
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

void GactStore::allocate_pool(const std::vector<size_t>& members) {
  // A tensor not estimated yet (tensors_per_refresh spreads the estimates over refreshes) keeps its
  // bits, and they come out of the budget: its sensitivity reads 0 until it is measured, which
  // would give it the fewest bits (every tensor but the first refresh's k at 1 bit, for
  // adapt_interval steps: 0.90 of the gradient's sampling variance on the quickstart's gact-L1).
  std::vector<double> c;
  std::vector<int64_t> numel;
  std::vector<size_t> estimated;  // table_ indices of c and numel
  double total = 0, kept_bits = 0, estimated_numel = 0;
  for (size_t l : members) {
    const TensorSensitivity& t = table_[l];
    total += static_cast<double>(t.numel);
    if (!t.estimated) {
      kept_bits += static_cast<double>(t.bits) * static_cast<double>(t.numel);
      continue;
    }
    c.push_back(t.sensitivity);
    numel.push_back(t.numel);
    estimated.push_back(l);
    estimated_numel += static_cast<double>(t.numel);
  }
  if (estimated_numel <= 0) return;
  const int fewest = *std::min_element(gopts_.candidate_bits.begin(), gopts_.candidate_bits.end());
  const double avg = std::max<double>(fewest, (gopts_.avg_bits * total - kept_bits) / estimated_numel);
  const std::vector<int> bits = allocate_bits(c, numel, avg, gopts_.candidate_bits);
  for (size_t k = 0; k < estimated.size(); ++k) table_[estimated[k]].bits = bits[k];
}

void GactStore::reallocate() {
  // One budget per pool of tensors held alike (gact_store.h): the forward's, and each recompute's.
  std::map<int64_t, std::vector<size_t>> pools;  // recomputed_in -> table_ indices
  for (size_t l = 0; l < table_.size(); ++l) pools[table_[l].recomputed_in].push_back(l);
  for (const auto& [recomputed_in, members] : pools) allocate_pool(members);
  const double predicted = predicted_variance(), sampling = sampling_variance();
  const bool was_warned = warned_;
  warned_ = std::isfinite(sampling) && predicted > gopts_.warn_ratio * sampling;
  if (warned_ && !was_warned)  // once when it starts, not at every refresh
    spdlog::warn("gact: the predicted quantization variance of the gradient ({:.4g}) exceeds {} of its sampling "
                 "variance ({:.4g}) at {:.2f} bits per element on average; raise avg_bits",
                 predicted, gopts_.warn_ratio, sampling, average_bits());
}

void GactStore::observe_gradients(const std::vector<Tensor>& grads) {
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
    const Tensor spread = be.binary(BinaryOp::Mul, delta, be.binary(BinaryOp::Sub, v, next));  // (n,)
    if (relative_variance()) {
      // Each row's spread over its running mean's squared norm now: the relative estimate's units.
      const Shape rows = row_shape(g);
      const Tensor next_rows = next.reshape(rows);
      const std::vector<double> m2 = row_sums(be, spread.reshape(rows)), norm = row_dots(be, next_rows, next_rows);
      for (size_t r = 0; r < m2.size(); ++r)
        if (norm[r] > 0) grad_m2_ += m2[r] / norm[r];
    } else {
      grad_m2_ += be.reduce_sum(spread);
    }
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
  if (!append) out << "step,index,layer,op,numel,sensitivity,bits,recomputed_in\n";
  for (const auto& t : table_)
    out << last_refresh_step_ << ',' << t.index << ',' << t.layer << ',' << t.op << ',' << t.numel << ','
        << fmt::format("{:.6g}", t.sensitivity) << ',' << t.bits << ',' << t.recomputed_in << '\n';
}

}  // namespace packrat
