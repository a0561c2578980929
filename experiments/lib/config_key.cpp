#include "experiments/lib/config_key.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/registry.h"

namespace packrat {

ConfigKey ConfigKey::quoted() const {
  ConfigKey k = *this;
  k.style = Style::Quoted;
  return k;
}
ConfigKey ConfigKey::shortest() const {
  ConfigKey k = *this;
  k.style = Style::Shortest;
  return k;
}
ConfigKey ConfigKey::one_of(std::vector<std::string> c) const {
  ConfigKey k = *this;
  k.choices = std::move(c);
  return k;
}
ConfigKey ConfigKey::one_of(std::function<std::vector<std::string>()> from) const {
  ConfigKey k = *this;
  k.choices_from = std::move(from);
  return k;
}
ConfigKey ConfigKey::for_datasets(std::vector<std::string> datasets) const {
  ConfigKey k = *this;
  k.only_for = std::move(datasets);
  return k;
}
ConfigKey ConfigKey::then(std::function<void(Config&, config::Section&)> f) const {
  ConfigKey k = *this;
  k.check = std::move(f);
  return k;
}

ConfigKey ConfigKey::unwritten_if(std::function<bool(const Config&)> f) const {
  ConfigKey k = *this;
  k.unwritten_when = std::move(f);
  return k;
}

std::vector<const ConfigKey*> section_keys(const std::string& section) {
  std::vector<const ConfigKey*> out;
  for (const ConfigKey& k : config_keys())
    if (k.section == section) out.push_back(&k);
  return out;
}

std::vector<std::string> section_key_names(const std::string& section) {
  std::vector<std::string> out;
  for (const ConfigKey* k : section_keys(section)) out.push_back(k->name);
  return out;
}

std::vector<std::string> config_sections() {
  std::vector<std::string> out;
  for (const ConfigKey& k : config_keys())
    if (!k.section.empty() && std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  return out;
}

namespace {

bool lists(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::vector<std::string> optimizer_keys(const std::string& name) {
  std::vector<std::string> out;
  if (const OptimizerKind* kind = optimizers().find(name))
    for (const auto& [key, def] : kind->keys) out.push_back(key);
  return out;
}

std::vector<std::string> schedule_keys(const std::string& name) {
  const LrScheduleKind* kind = lr_schedules().find(name);
  return kind ? kind->keys : std::vector<std::string>{};
}

}  // namespace

std::vector<std::string> key_readers(const ConfigKey& k) {
  std::vector<std::string> out;
  if (k.section == "optimizer")
    for (const auto& name : optimizers().names())
      if (lists(optimizer_keys(name), k.name)) out.push_back(name);
  if (k.section == "schedule")
    for (const auto& name : lr_schedules().names())
      if (lists(schedule_keys(name), k.name)) out.push_back(name);
  return out;
}

std::vector<std::string> chosen_kind_keys(const std::string& section, const Config& c) {
  if (section == "optimizer") return optimizer_keys(c.optimizer.name);
  if (section == "schedule") return schedule_keys(c.schedule.name);
  return {};
}

std::string default_for(const ConfigKey& k, const Config& c) {
  if (k.default_from) return k.default_from(c);
  if (k.section == "optimizer")
    if (const OptimizerKind* kind = optimizers().find(c.optimizer.name))
      for (const auto& [key, def] : kind->keys)
        if (key == k.name) return def;
  return k.default_text;
}

std::vector<const ConfigKey*> written_keys(const std::string& section, const Config& c) {
  std::vector<const ConfigKey*> out;
  const std::vector<const ConfigKey*> keys = section_keys(section);
  if (section == "optimizer" || section == "schedule") {
    // The keys every optimizer (schedule) reads, then the chosen one's in its own order.
    for (const ConfigKey* k : keys)
      if (key_readers(*k).empty()) out.push_back(k);
    for (const std::string& name : chosen_kind_keys(section, c))
      for (const ConfigKey* k : keys)
        if (k->name == name) out.push_back(k);
    return out;
  }
  Config copy = c;  // the field accessors take a mutable Config
  for (const ConfigKey* k : keys) {
    if (!k->only_for.empty() && !lists(k->only_for, c.data.dataset)) continue;
    if (k->unwritten_when && k->unwritten_when(c)) continue;
    // Only the keys the architecture reads: the reader refuses the others.
    if (section == "model" && k->name != "arch" && !lists(model_keys(c.model.arch), k->name)) continue;
    if (k->unset_by_default) {
      const FieldRef f = k->field(copy);
      if (std::holds_alternative<double*>(f) && *std::get<double*>(f) == std::stod(k->default_text)) continue;
    }
    out.push_back(k);
  }
  return out;
}

namespace {

std::string range_text(const ConfigKey& k) {
  switch (k.type) {
    case KeyType::Integer:
      if (k.int_max == INT64_MAX) return fmt::format(">= {}", k.int_min);
      return fmt::format("{} to {}", k.int_min, k.int_max);
    case KeyType::Number: return fmt::format("{} to {}", k.min, k.max);
    case KeyType::Boolean: return "true, false";
    case KeyType::Text: {
      std::vector<std::string> c = k.choices_from ? k.choices_from() : k.choices;
      std::string s;
      for (const auto& x : c) s += (s.empty() ? "" : ", ") + (x.empty() ? std::string("\"\"") : "`" + x + "`");
      return s.empty() ? "string" : s;
    }
    case KeyType::TextList: return "list of strings";
    case KeyType::EpochList: return "increasing epochs";
    case KeyType::Custom: return "see below";
  }
  return "";
}

std::string default_text(const ConfigKey& k) {
  if (k.required) return "required";
  if (!k.default_doc.empty()) return k.default_doc;
  if (k.section == "optimizer" && k.name != "name") {
    std::string s;
    for (const auto& name : key_readers(k)) {
      Config c;
      c.optimizer.name = name;
      s += fmt::format("{}{}: `{}`", s.empty() ? "" : ", ", name, default_for(k, c));
    }
    return s;
  }
  return k.default_text.empty() ? "\"\"" : "`" + k.default_text + "`";
}

std::string meaning(const ConfigKey& k) {
  std::string s = k.help;
  if (!k.only_for.empty()) {
    std::string d;
    for (const auto& x : k.only_for) d += (d.empty() ? "`" : ", `") + x + "`";
    s += fmt::format(" (data.dataset {} only)", d);
  }
  const std::vector<std::string> readers = key_readers(k);
  const size_t kinds = k.section == "optimizer" ? optimizers().names().size() : lr_schedules().names().size();
  if (!readers.empty() && readers.size() < kinds) {
    std::string d;
    for (const auto& x : readers) d += (d.empty() ? "`" : ", `") + x + "`";
    s += fmt::format(" ({} only)", d);
  }
  return s.rfind(' ', 0) == 0 ? s.substr(1) : s;
}

}  // namespace

std::string config_keys_markdown() {
  std::string s = "| key | default | values | meaning |\n|---|---|---|---|\n";
  for (const ConfigKey& k : config_keys())
    s += fmt::format("| `{}` | {} | {} | {} |\n", k.path(), default_text(k), range_text(k), meaning(k));
  return s;
}

}  // namespace packrat
