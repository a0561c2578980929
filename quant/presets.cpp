#include "quant/presets.h"

#include "core/error.h"
#include "quant/gact_policy.h"
#include "quant/group_store.h"
#include "quant/rule_policy.h"

namespace packrat {

const std::vector<GroupPreset>& group_presets() {
  static const std::vector<GroupPreset> presets = {
      {"L1", "actnn", {{"bits", "4"}}, "fixed 4-bit per-group quantization"},
      {"L2", "gact", {{"avg_bits", "4"}}, "adaptive bits (GACT), 4 bits per element on average"},
      {"L2.3", "gact", {{"avg_bits", "3"}}, "adaptive bits (GACT), 3 bits per element on average"},
      {"L2.2", "gact", {{"avg_bits", "2"}}, "adaptive bits (GACT), 2 bits per element on average"},
      {"L3", "actnn", {{"bits", "2"}}, "fixed 2-bit per-group quantization"},
  };
  return presets;
}

const GroupPreset* find_group_preset(const std::string& name) {
  for (const auto& p : group_presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::unique_ptr<SavedTensorStore> make_group_scheme_store(const std::string& scheme, SchemeOptions& o) {
  if (scheme == "actnn") return make_group_store(o);
  if (scheme == "gact") return make_gact_store(o);
  const GroupPreset* p = find_group_preset(scheme);
  if (!p) {
    std::string list = "actnn, gact";
    for (const auto& q : group_presets()) list += ", " + q.name;
    fail("{}: unknown per-group scheme '{}'; available: {}", o.where(), scheme, list);
  }
  // The preset's values are the defaults; keys written in the config override them.
  SchemeOptions preset(p->options, o.where() + " (preset " + p->name + ")");
  if (p->scheme == "actnn") {
    const GroupStoreOptions base = GroupStore::parse_options(preset);
    GroupStoreOptions g = GroupStore::parse_options(o, base);
    o.check_all_used();
    return std::make_unique<GroupStore>(g);
  }
  GactOptions base = GactStore::parse_options(preset);
  GactOptions g = GactStore::parse_options(o, base);
  o.check_all_used();
  return std::make_unique<GactStore>(std::move(g));
}

void register_group_schemes() {
  std::vector<std::string> names = {"actnn", "gact"};
  for (const auto& p : group_presets()) names.push_back(p.name);
  for (const auto& name : names)
    register_scheme(name, [name](SchemeOptions& o) { return make_group_scheme_store(name, o); }, /*seeded=*/true);
}

}  // namespace packrat
