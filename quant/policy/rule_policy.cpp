#include "quant/policy/rule_policy.h"

#include <mutex>

#include "autograd/fp32_store.h"
#include "autograd/pointwise.h"
#include "autograd/saving_op_kinds.h"
#include "core/error.h"
#include "quant/fewbit/fewbit_store.h"
#include "quant/fp8/fp8_store.h"
#include "quant/group/gact_store.h"
#include "quant/group/group_store.h"
#include "quant/mixed/mixed_store.h"
#include "quant/policy/presets.h"

namespace packrat {

std::vector<std::string> saving_op_kinds() { return registered_saving_op_kinds(); }

bool is_op_kind(std::string_view op) {
  for (const auto& k : saving_op_kinds())
    if (k == op) return true;
  return is_pointwise_name(op);
}

namespace {
std::mutex g_schemes_mutex;

struct Scheme {
  StoreFactory factory;
  bool seeded = false;
};

std::map<std::string, Scheme>& schemes() {  // callers hold g_schemes_mutex
  static std::map<std::string, Scheme> table = [] {
    std::map<std::string, Scheme> t;
    t["fp32"] = {[](SchemeOptions&) { return std::make_unique<Fp32Store>(); }, false};
    t["fewbit"] = {make_fewbit_store, false};
    t["actnn"] = {make_group_store, true};
    t["gact"] = {make_gact_store, true};
    t["mixed"] = {make_mixed_store, true};
    t["deterministic"] = {make_deterministic_store, false};
    t["fp8"] = {make_fp8_store, false};
    // ActNN's and GACT's levels (quant/policy/presets.h); a preset kept in FP32 reads no seed.
    for (const StoragePreset& p : storage_presets())
      t[p.name] = {[name = p.name](SchemeOptions& o) { return make_preset_store(name, o); },
                   p.scheme == "actnn" || p.scheme == "gact"};
    return t;
  }();
  return table;
}
}  // namespace

void register_scheme(const std::string& name, StoreFactory factory, bool seeded) {
  std::lock_guard lock(g_schemes_mutex);
  schemes()[name] = {std::move(factory), seeded};
}

std::vector<std::string> available_schemes() {
  std::lock_guard lock(g_schemes_mutex);
  std::vector<std::string> out;
  for (const auto& [name, f] : schemes()) out.push_back(name);
  return out;
}

std::unique_ptr<SavedTensorStore> make_store(const SchemeSpec& spec, uint64_t seed) {
  Scheme scheme;
  {
    std::lock_guard lock(g_schemes_mutex);
    auto it = schemes().find(spec.scheme);
    if (it != schemes().end()) scheme = it->second;
  }
  const StoreFactory& factory = scheme.factory;
  if (!factory) {
    std::string list;
    for (const auto& s : available_schemes()) {
      const StoragePreset* p = find_storage_preset(s);
      if (!p || !p->scheme.empty()) list += (list.empty() ? "" : ", ") + s;  // not the levels packrat lacks
    }
    fail("{}: unknown scheme '{}'; available: {}", spec.where, spec.scheme, list);
  }
  auto values = spec.options;
  if (scheme.seeded && !values.count("seed")) values["seed"] = std::to_string(seed);
  SchemeOptions options(values, spec.where);
  std::unique_ptr<SavedTensorStore> store = factory(options);
  options.check_all_used();
  return store;
}

void check_rule_layers(const StorePolicySpec& spec, const std::vector<std::string>& layer_names, const std::string& model) {
  for (const StoreRule& rule : spec.rules)
    for (const std::string& pattern : rule.layers) {
      bool found = false;
      for (const std::string& name : layer_names) found = found || glob_match(pattern, name);
      if (found) continue;
      std::string some;  // the first few, enough to show how the model names its layers
      for (size_t i = 0; i < layer_names.size() && i < 8; ++i) some += (i ? ", " : "") + layer_names[i];
      fail("{}: layers pattern \"{}\" matches no layer of {}, so the rule would never apply (its {} layers: {}{})",
           rule.spec.where, pattern, model, layer_names.size(), some, layer_names.size() > 8 ? ", ..." : "");
    }
}

RulePolicy::RulePolicy(const StorePolicySpec& spec, const std::optional<OffloadRule>& offload) : spec_(spec) {
  default_ = make_store(spec_.default_scheme, spec_.seed);
  for (const auto& rule : spec_.rules) rule_stores_.push_back(make_store(rule.spec, spec_.seed));
  last_resort_ = std::make_unique<Fp32Store>();
  if (offload) {
    offloader_ = std::make_unique<Offloader>(*offload);
    for (SavedTensorStore* s : stores()) offloading_.emplace(s, std::make_unique<OffloadingStore>(*s, *offloader_));
  }
}

RulePolicy::~RulePolicy() = default;

int RulePolicy::match(const SaveRequest& r) const {
  for (size_t i = 0; i < spec_.rules.size(); ++i) {
    const StoreRule& rule = spec_.rules[i];
    bool op_ok = rule.ops.empty();
    for (const auto& op : rule.ops)
      if (op == r.op || (r.fn && op == r.fn->name)) op_ok = true;
    if (!op_ok) continue;
    bool layer_ok = rule.layers.empty();
    for (const auto& pattern : rule.layers)
      if (glob_match(pattern, r.name)) layer_ok = true;
    if (layer_ok) return static_cast<int>(i);
  }
  return -1;
}

SavedTensorStore& RulePolicy::store_for(const SaveRequest& r) {
  SavedTensorStore& s = chosen_store(r);
  return offloader_ ? *offloading_.at(&s) : s;
}

SavedTensorStore& RulePolicy::chosen_store(const SaveRequest& r) {
  const int i = match(r);
  if (i >= 0 && rule_stores_[static_cast<size_t>(i)]->accepts(r)) return *rule_stores_[static_cast<size_t>(i)];
  if (default_->accepts(r)) return *default_;
  return *last_resort_;
}

std::vector<SavedTensorStore*> RulePolicy::stores() {
  std::vector<SavedTensorStore*> out{default_.get()};
  for (auto& s : rule_stores_) out.push_back(s.get());
  out.push_back(last_resort_.get());
  return out;
}

}  // namespace packrat
