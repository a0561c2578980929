#pragma once
// memory.offload: which saved tensors move to host memory (autograd/offload/offload_rule.h). A
// mapping of its own keys, so it has its own reader and writer.
#include <optional>

#include <yaml-cpp/yaml.h>

#include "autograd/offload/offload_rule.h"
#include "experiments/lib/config_section.h"

namespace packrat::config {

// Reads memory.offload from the memory section (unset: nullopt; `{}`: every saved tensor).
std::optional<OffloadRule> parse_offload(Section& memory);
void emit_offload(YAML::Emitter& e, const OffloadRule& rule);

}  // namespace packrat::config
