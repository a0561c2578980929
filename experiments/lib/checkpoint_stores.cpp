#include "experiments/lib/checkpoint_stores.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "core/error.h"

namespace packrat {

namespace {

// The stores grouped by state name, names in order of first appearance.
std::vector<std::pair<std::string, std::vector<SavedTensorStore*>>> by_state_name(
    const std::vector<SavedTensorStore*>& stores) {
  std::vector<std::pair<std::string, std::vector<SavedTensorStore*>>> out;
  for (SavedTensorStore* s : stores) {
    const std::string name(s->state_name());
    if (name.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == name; });
    if (it == out.end()) it = out.insert(out.end(), {name, {}});
    it->second.push_back(s);
  }
  return out;
}

std::string upper(std::string s) {  // "gact" -> "GACT", as the messages name a scheme
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void append_store_state(NamedTensors& all, const std::vector<SavedTensorStore*>& stores) {
  for (const auto& [name, group] : by_state_name(stores)) {
    Tensor count = Tensor::empty(Shape{}, DType::i64, Layout::Plain, MemTag::Workspace, Device::cpu());
    count.data<int64_t>()[0] = static_cast<int64_t>(group.size());
    all.emplace_back(name + ".stores", count);
    for (size_t i = 0; i < group.size(); ++i)
      for (auto& [n, t] : group[i]->export_state()) all.emplace_back(fmt::format("{}.{}.{}", name, i, n), t);
  }
}

void restore_store_state(const SafetensorsFile& f, const std::vector<SavedTensorStore*>& stores,
                         const std::string& path) {
  auto groups = by_state_name(stores);
  // A name the file holds state for ("N.stores") but no store of this config has: checked too.
  for (const auto& [n, t] : f.tensors)
    if (const size_t dot = n.find('.'); dot != std::string::npos && n.substr(dot) == ".stores")
      if (std::none_of(groups.begin(), groups.end(), [&](const auto& g) { return g.first == n.substr(0, dot); }))
        groups.emplace_back(n.substr(0, dot), std::vector<SavedTensorStore*>{});
  for (const auto& [name, group] : groups) {
    const std::string prefix = name + ".", label = upper(name);
    bool has_state = false;
    for (const auto& [n, t] : f.tensors) has_state = has_state || n.starts_with(prefix);
    if (!has_state) {
      spdlog::warn("{}: the checkpoint has no {} state (a run without {}, or an older checkpoint): the adaptive bit "
                   "allocation starts afresh, so this run does not continue bit-identically",
                   path, label, name);
      continue;
    }
    const Tensor* count = f.find(prefix + "stores");
    PACKRAT_CHECK(count && count->dtype() == DType::i64 && count->numel() == 1,
                  "{}: checkpoint has no i64 scalar '{}stores'", path, prefix);
    const int64_t saved = count->data<int64_t>()[0];
    PACKRAT_CHECK(saved == static_cast<int64_t>(group.size()),
                  "{}: the checkpoint holds the adaptive state of {} {} store(s), but this config uses {} (the "
                  "saved_tensors config differs from the checkpointed run's)",
                  path, saved, label, group.size());
    std::vector<NamedTensors> state(group.size());
    for (const auto& [n, t] : f.tensors) {
      if (!n.starts_with(prefix) || n == prefix + "stores") continue;
      const size_t dot = n.find('.', prefix.size());
      size_t i = group.size();
      try {
        if (dot != std::string::npos && dot > prefix.size()) i = std::stoul(n.substr(prefix.size(), dot - prefix.size()));
      } catch (const std::exception&) {
      }
      PACKRAT_CHECK(i < group.size(), "{}: '{}' is not the state of one of its {} {} store(s)", path, n, group.size(),
                    label);
      state[i].emplace_back(n.substr(dot + 1), t);
    }
    for (size_t i = 0; i < group.size(); ++i)
      group[i]->import_state(state[i], fmt::format("{}: {} store {}", path, name, i), fmt::format("{}{}.", prefix, i));
  }
}

}  // namespace packrat
