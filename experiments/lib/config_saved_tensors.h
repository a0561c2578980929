#pragma once
// The saved_tensors section: a default scheme and ordered rules, each a scheme with options
// (quant/policy/rule_policy.h). Its shape is not one of plain keys, so it has its own reader and writer.
#include <yaml-cpp/yaml.h>

#include "experiments/lib/config_section.h"
#include "quant/policy/rule_policy.h"

namespace packrat::config {

StorePolicySpec parse_saved_tensors(Section s);
// The section's value (a mapping) as the resolved config writes it.
void emit_saved_tensors(YAML::Emitter& e, const StorePolicySpec& spec);
// A flow list of double-quoted strings: ["hflip", "random_crop(32, 4)"].
void emit_list(YAML::Emitter& e, const std::vector<std::string>& v);

}  // namespace packrat::config
