// The resolved config writer: every key the config reads, defaults included, from the
// descriptors (config_key.h); parse_config reads it back to an equal Config.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "experiments/lib/config.h"
#include "experiments/lib/config_key.h"
#include "experiments/lib/config_layers.h"
#include "experiments/lib/config_offload.h"
#include "experiments/lib/config_saved_tensors.h"

namespace packrat {

namespace {

std::string num(double v) { return fmt::format("{}", v); }  // shortest round-trip form

void emit_value(YAML::Emitter& e, const ConfigKey& k, Config& c) {
  const FieldRef f = k.field(c);
  if (auto* p = std::get_if<uint64_t*>(&f)) e << **p;
  else if (auto* p = std::get_if<int64_t*>(&f)) e << **p;
  else if (auto* p = std::get_if<double*>(&f)) k.style == Style::Shortest ? e << num(**p) : e << **p;
  else if (auto* p = std::get_if<bool*>(&f)) e << **p;
  else if (auto* p = std::get_if<std::string*>(&f)) k.style == Style::Quoted ? e << YAML::DoubleQuoted << **p : e << **p;
  else if (auto* p = std::get_if<std::vector<std::string>*>(&f)) config::emit_list(e, **p);
  else if (auto* p = std::get_if<std::vector<int64_t>*>(&f)) {
    e << YAML::Flow << YAML::BeginSeq;
    for (int64_t m : **p) e << m;
    e << YAML::EndSeq;
  }
}

}  // namespace

std::string config_to_yaml(const Config& resolved) {
  Config c = resolved;  // the descriptors' field accessors take a mutable Config
  YAML::Emitter e;
  e << YAML::BeginMap;
  for (const ConfigKey* k : written_keys("", c)) {
    e << YAML::Key << k->name << YAML::Value;
    emit_value(e, *k, c);
  }
  for (const std::string& section : config_sections()) {
    e << YAML::Key << section << YAML::Value;
    if (section == "saved_tensors") {  // rules of schemes, not plain keys
      config::emit_saved_tensors(e, c.saved_tensors);
      continue;
    }
    e << YAML::BeginMap;
    for (const ConfigKey* k : written_keys(section, c)) {
      if (k->type == KeyType::Custom) continue;  // model.layers, memory.offload: below
      e << YAML::Key << k->name << YAML::Value;
      emit_value(e, *k, c);
    }
    if (section == "model" && !c.model.layers.empty()) {
      e << YAML::Key << "layers" << YAML::Value;
      config::emit_layers(e, c.model.layers);
    }
    if (section == "memory" && c.memory.offload) {
      e << YAML::Key << "offload" << YAML::Value;
      config::emit_offload(e, *c.memory.offload);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace packrat
