#include "experiments/lib/config_saved_tensors.h"

#include "autograd/pointwise.h"

namespace packrat::config {

namespace {

// A scheme: a name (the default only), or a mapping with 'scheme' and its options; a rule also
// has the 'ops' and/or 'layers' it matches.
SchemeSpec parse_scheme(YAML::Node n, const std::string& full_key, const Section& parent, bool is_rule,
                        std::vector<std::string>* ops, std::vector<std::string>* layers) {
  SchemeSpec spec;
  const std::string where = parent.where(full_key, n.Mark());
  spec.where = where.rfind("--set", 0) == 0 ? where : fmt::format("{} (line {})", full_key, n.Mark().line + 1);
  // Options of this scheme given on the command line are named as such.
  for (const auto& o : parent.origin().overridden)
    if (o.rfind(full_key + ".", 0) == 0) spec.where += fmt::format(" (--set {})", o);
  if (n.IsScalar() && !is_rule) {  // default: fp32
    spec.scheme = n.Scalar();
    return spec;
  }
  if (!n.IsMap()) parent.error_at(full_key, n.Mark(), is_rule ? "a rule must be a mapping, e.g. {ops: [gelu], scheme: fewbit, bits: 3}"
                                                                 : "must be a scheme name or a mapping with 'scheme'");
  bool has_scheme = false;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;
    const std::string kp = full_key + "." + k;
    if (k == "scheme") {
      if (!v.IsScalar()) parent.error_at(kp, v.Mark(), "must be a scheme name");
      spec.scheme = v.Scalar();
      has_scheme = true;
    } else if (is_rule && (k == "ops" || k == "layers")) {
      std::vector<std::string>& out = k == "ops" ? *ops : *layers;
      if (v.IsScalar()) {
        out.push_back(v.Scalar());
      } else if (v.IsSequence()) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].IsScalar()) parent.error_at(fmt::format("{}[{}]", kp, i), v[i].Mark(), "must be a string");
          out.push_back(v[i].Scalar());
        }
      } else {
        parent.error_at(kp, v.Mark(), "must be a list of strings");
      }
      if (k == "ops")
        for (const auto& op : out)
          if (!is_op_kind(op))
            parent.error_at(kp, v.Mark(), fmt::format("unknown op '{}'; ops that save tensors: {}, or an activation "
                                                      "name (relu, gelu, silu, ...)", op, join(saving_op_kinds())));
    } else {
      if (!v.IsScalar()) parent.error_at(kp, v.Mark(), "scheme options must be single values");
      spec.options[k] = v.Scalar();
    }
  }
  if (!has_scheme) parent.error_at(full_key, n.Mark(), "needs a 'scheme' (available: " + join(available_schemes()) + ")");
  if (is_rule && ops->empty() && layers->empty())
    parent.error_at(full_key, n.Mark(), "a rule needs 'ops' and/or 'layers' to match on (use 'default' for everything)");
  return spec;
}

}  // namespace

StorePolicySpec parse_saved_tensors(Section s) {
  StorePolicySpec spec;
  YAML::Node def = s.raw("default");
  if (def.IsDefined() && !def.IsNull()) spec.default_scheme = parse_scheme(def, s.key_path("default"), s, false, nullptr, nullptr);
  YAML::Node rules = s.raw("rules");
  if (rules.IsDefined() && !rules.IsNull()) {
    if (!rules.IsSequence()) s.error_at(s.key_path("rules"), rules.Mark(), "must be a list of rules");
    for (size_t i = 0; i < rules.size(); ++i) {
      StoreRule rule;
      rule.spec = parse_scheme(rules[i], fmt::format("{}[{}]", s.key_path("rules"), i), s, true, &rule.ops, &rule.layers);
      spec.rules.push_back(std::move(rule));
    }
  }
  s.finish({"default", "rules"});
  return spec;
}

void emit_scheme(YAML::Emitter& e, const SchemeSpec& s) {
  e << YAML::Key << "scheme" << YAML::Value << s.scheme;
  for (const auto& [k, v] : s.options) e << YAML::Key << k << YAML::Value << v;
}

void emit_list(YAML::Emitter& e, const std::vector<std::string>& v) {
  e << YAML::Flow << YAML::BeginSeq;
  for (const auto& x : v) e << YAML::DoubleQuoted << x;
  e << YAML::EndSeq;
}

void emit_saved_tensors(YAML::Emitter& e, const StorePolicySpec& spec) {
  e << YAML::BeginMap;
  e << YAML::Key << "default" << YAML::Value << YAML::Flow << YAML::BeginMap;
  emit_scheme(e, spec.default_scheme);
  e << YAML::EndMap;
  e << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : spec.rules) {
    e << YAML::Flow << YAML::BeginMap;
    if (!r.ops.empty()) {
      e << YAML::Key << "ops" << YAML::Value;
      emit_list(e, r.ops);
    }
    if (!r.layers.empty()) {
      e << YAML::Key << "layers" << YAML::Value;
      emit_list(e, r.layers);
    }
    emit_scheme(e, r.spec);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
}

}  // namespace packrat::config
