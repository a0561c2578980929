#include "experiments/lib/config_offload.h"

#include <charconv>

#include "experiments/lib/config_saved_tensors.h"
#include "quant/policy/rule_policy.h"

namespace packrat::config {

namespace {

std::vector<std::string> string_list(YAML::Node v, const std::string& kp, const Section& s) {
  std::vector<std::string> out;
  if (v.IsScalar()) return {v.Scalar()};
  if (!v.IsSequence()) s.error_at(kp, v.Mark(), "must be a list of strings");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsScalar()) s.error_at(fmt::format("{}[{}]", kp, i), v[i].Mark(), "must be a string");
    out.push_back(v[i].Scalar());
  }
  return out;
}

int64_t whole_number(YAML::Node v, const std::string& kp, const Section& s, int64_t lo, int64_t hi) {
  int64_t n = 0;
  const std::string text = v.IsScalar() ? v.Scalar() : std::string();
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (!v.IsScalar() || ec != std::errc() || end != text.data() + text.size())
    s.error_at(kp, v.Mark(), fmt::format("must be a whole number from {} to {}", lo, hi));
  if (n < lo || n > hi) s.error_at(kp, v.Mark(), fmt::format("is {}, must be from {} to {}", n, lo, hi));
  return n;
}

}  // namespace

std::optional<OffloadRule> parse_offload(Section& memory) {
  YAML::Node n = memory.raw("offload");
  if (!n.IsDefined()) return std::nullopt;
  const std::string kp = memory.key_path("offload");
  if (!n.IsMap())
    memory.error_at(kp, n.Mark(),
                    "must be a mapping: {} offloads every saved tensor; {ops: [conv2d], layers: [\"layer3.*\"], "
                    "min_bytes: 65536, prefetch: 2} chooses");
  OffloadRule rule;
  rule.where = kp;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;
    const std::string key = kp + "." + k;
    if (k == "ops") {
      rule.ops = string_list(v, key, memory);
      for (const auto& op : rule.ops)
        if (!is_op_kind(op))
          memory.error_at(key, v.Mark(), fmt::format("unknown op '{}'; ops that save tensors: {}, or an activation "
                                                     "name (relu, gelu, silu, ...)", op, fmt::join(saving_op_kinds(), ", ")));
    } else if (k == "layers") {
      rule.layers = string_list(v, key, memory);
    } else if (k == "min_bytes") {
      rule.min_bytes = whole_number(v, key, memory, 0, int64_t{1} << 50);
    } else if (k == "prefetch") {
      rule.prefetch = static_cast<int>(whole_number(v, key, memory, 0, kMaxOffloadPrefetch));
    } else if (k == "in_flight_bytes") {
      rule.in_flight_bytes = whole_number(v, key, memory, 0, int64_t{1} << 50);
    } else {
      memory.error_at(key, it->first.Mark(),
                      "unknown key; memory.offload takes ops, layers, min_bytes, prefetch and in_flight_bytes");
    }
  }
  return rule;
}

void emit_offload(YAML::Emitter& e, const OffloadRule& rule) {
  e << YAML::Flow << YAML::BeginMap;
  if (!rule.ops.empty()) {
    e << YAML::Key << "ops" << YAML::Value;
    emit_list(e, rule.ops);
  }
  if (!rule.layers.empty()) {
    e << YAML::Key << "layers" << YAML::Value;
    emit_list(e, rule.layers);
  }
  e << YAML::Key << "min_bytes" << YAML::Value << rule.min_bytes;
  e << YAML::Key << "prefetch" << YAML::Value << rule.prefetch;
  e << YAML::Key << "in_flight_bytes" << YAML::Value << rule.in_flight_bytes;
  e << YAML::EndMap;
}

}  // namespace packrat::config
