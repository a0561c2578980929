#pragma once
// What the config reader does to the YAML before reading its keys: refuse duplicate keys, and
// apply --set overrides. Internal to the config reader (experiments/lib/config.h).
#include <yaml-cpp/yaml.h>

#include <string>

#include "experiments/lib/config_section.h"

namespace packrat::config {

// YAML parsers keep one of two equal keys in a mapping (yaml-cpp the first): a second `data:`
// section or a repeated key would be dropped without a word. Throws naming both lines.
void check_duplicate_keys(const YAML::Node& n, const std::string& path, const std::string& file);

// Applies one "dotted.key=value" (--set) to `root`, recording the key in origin.overridden. The
// value is read as YAML; sequence items are addressed as rules[1] or rules.1.
void apply_override(YAML::Node& root, const std::string& arg, Origin& origin);

}  // namespace packrat::config
