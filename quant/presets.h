#pragma once
// Storage presets named after ActNN's and GACT's optimisation levels (the parts that concern
// what is stored; swapping, checkpointing and defragmentation are not storage schemes):
//
//   L1    fixed 4-bit per-group quantization (ActNN L1-L2 storage, GACT "fix-4bit")  -> actnn bits 4
//   L2    adaptive, 4 bits per element on average (GACT L1 "auto-precision 4")       -> gact avg_bits 4
//   L2.3  adaptive, 3 bits on average (GACT "adapt 3bit")                             -> gact avg_bits 3
//   L2.2  adaptive, 2 bits on average (GACT "adapt 2bit")                             -> gact avg_bits 2
//   L3    fixed 2-bit per-group quantization (ActNN L3 storage)                      -> actnn bits 2
//
// A preset is usable wherever a scheme name is (`default: {scheme: L2.2, adapt_interval: 500}`);
// keys written next to it override the preset's values.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "quant/scheme_options.h"

namespace packrat {

struct GroupPreset {
  std::string name;     // "L2.2"
  std::string scheme;   // "actnn" or "gact"
  std::map<std::string, std::string> options;  // the preset's values, e.g. {avg_bits: 2}
  std::string summary;  // one line for --help and reports
};
const std::vector<GroupPreset>& group_presets();
const GroupPreset* find_group_preset(const std::string& name);  // null when not a preset

// Builds the store of "actnn", "gact" or a preset name; options as written override the
// preset's. Calls o.check_all_used(). Throws naming o.where() for an unknown name.
std::unique_ptr<SavedTensorStore> make_group_scheme_store(const std::string& scheme, SchemeOptions& o);

// Registers "actnn", "gact" and every preset with the rule policy's scheme registry
// (quant/rule_policy.h), seeded (the run seed fills `seed`). Idempotent; executables call it
// before reading a config.
void register_group_schemes();

}  // namespace packrat
