// The GACT store's adaptive state as named host tensors, for checkpoints: export, import and
// the check of a restored table against the first step that quantizes (gact_store.h).
#include "quant/group/gact_store.h"

#include <cstring>
#include <map>
#include <set>

#include "core/error.h"

namespace packrat {

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
           est = state_tensor(L, DType::u8), recomputed_in = state_tensor(L, DType::i64);
    std::string names;
    for (int64_t l = 0; l < L; ++l) {
      const TensorSensitivity& t = table_[static_cast<size_t>(l)];
      c.data<double>()[l] = t.sensitivity;
      bits.data<int32_t>()[l] = t.bits;
      numel.data<int64_t>()[l] = t.numel;
      est.data<uint8_t>()[l] = t.estimated ? 1 : 0;
      recomputed_in.data<int64_t>()[l] = t.recomputed_in;
      names += t.layer + '\t' + t.op + '\n';
    }
    Tensor n = state_tensor(static_cast<int64_t>(names.size()), DType::u8);
    std::memcpy(n.raw(), names.data(), names.size());
    out.emplace_back("sensitivity", c);
    out.emplace_back("bits", bits);
    out.emplace_back("numel", numel);
    out.emplace_back("estimated", est);
    out.emplace_back("names", n);
    out.emplace_back("recomputed_in", recomputed_in);
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

// Sizes the store would trust before it allocates by them: the number of tensors agrees with
// the sensitivities, element counts are positive and bounded, and the running gradient mean has
// one entry per model parameter (when observe_model told the count).
void GactStore::check_state_sizes(const std::map<std::string, const Tensor*>& by_name, const std::string& where,
                                  const std::string& p) const {
  auto find = [&](const char* n) -> const Tensor* {
    auto it = by_name.find(n);
    return it == by_name.end() ? nullptr : it->second;
  };
  const Tensor* L = find("tensors");
  if (L == nullptr || L->dtype() != DType::i64 || L->numel() != 1) return;  // the import names what is missing
  const Tensor* sens = find("sensitivity");
  const int64_t n = L->to_plain().data<int64_t>()[0], have = sens ? sens->numel() : 0;
  PACKRAT_CHECK(n >= 0 && n == have, "{}: '{}tensors' is {} but '{}sensitivity' has {} entries: the GACT state is corrupt",
                where, p, n, p, have);
  if (const Tensor* numel = find("numel"); numel && numel->dtype() == DType::i64) {
    const Tensor host = numel->to_plain();
    for (int64_t k = 0; k < host.numel(); ++k) {
      const int64_t v = host.data<int64_t>()[k];
      PACKRAT_CHECK(v >= 0 && v <= (int64_t{1} << 40), "{}: '{}numel' entry {} is {}, not an element count", where, p,
                    k, v);
    }
  }
  if (const Tensor* mean = find("grad_mean"); mean && parameters_ > 0)
    PACKRAT_CHECK(mean->numel() == parameters_,
                  "{}: '{}grad_mean' has {} entries but the model has {} parameters: the GACT state is of another model",
                  where, p, mean->numel(), parameters_);
}

void GactStore::import_state(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& where,
                             const std::string& entry_prefix) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : state) by_name[n] = &t;
  check_state_sizes(by_name, where, entry_prefix);
  static const std::set<std::string> known = {
      "tensors",     "sensitivity",  "bits",        "numel",      "estimated", "names",   "last_refresh_step",
      "refreshes",   "round_robin",  "salt_counter", "last_passes", "warned",   "grad_count", "grad_m2",
      "grad_mean",   "pending_analytic", "recomputed_in"};
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
    // Absent in checkpoints from before the per-pool budgets: one budget until the next step's.
    const Tensor* recomputed_in = get("recomputed_in", DType::i64, L, false);
    const Tensor pools = recomputed_in ? recomputed_in->to_plain() : Tensor();
    const std::string text(reinterpret_cast<const char*>(names.raw()), static_cast<size_t>(names.nbytes()));
    size_t pos = 0;
    for (int64_t l = 0; l < L; ++l) {
      TensorSensitivity& t = table[static_cast<size_t>(l)];
      t.index = l;
      t.sensitivity = c.data<double>()[l];
      t.bits = bits.data<int32_t>()[l];
      t.numel = numel.data<int64_t>()[l];
      t.estimated = est.data<uint8_t>()[l] != 0;
      t.recomputed_in = pools.defined() ? pools.data<int64_t>()[l] : 0;
      PACKRAT_CHECK(t.recomputed_in >= 0 && t.recomputed_in <= L, "{}: GACT tensor {} has recomputed_in {}, not 0 to {}",
                    where, l, t.recomputed_in, L);
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
    for (const char* n : {"sensitivity", "bits", "numel", "estimated", "names", "recomputed_in"})
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
