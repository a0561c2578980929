#pragma once
// One descriptor per config key: its section and name, the Config field it fills, its type,
// range or choices, default and help. The table (config_table.cpp) drives the reader
// (config_parse.cpp: types, ranges, the unknown-key check and its list of known keys), the
// resolved-config writer (config_writer.cpp) and the README's table of keys
// (config_keys_markdown; a test checks that README.md holds it).
//
// Adding a key: one ConfigKey in config_table.cpp, the struct field it fills (config.h) and the
// code that uses it. An optimizer or schedule key is also listed by the optimizers / schedules
// that read it (optim/registry.cpp, optim/lr_schedule.cpp), a model key by model_keys
// (models/registry.cpp): the config refuses a key that the chosen one does not read.
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "experiments/lib/config.h"

namespace packrat {

namespace config {
class Section;
}

enum class KeyType {
  Integer,    // int_min..int_max
  Number,     // min..max, finite
  Boolean,
  Text,       // one of `choices` (or `choices_from`), or any string when both are empty
  TextList,   // a list of strings; a single string may be written without brackets
  EpochList,  // increasing epochs >= 1
  Custom,     // read and written by its section's own code (saved_tensors)
};

// How the resolved config writes a value: as yaml-cpp writes it, double-quoted (strings that may
// be empty), or a number in its shortest round-trip form.
enum class Style { Plain, Quoted, Shortest };

using FieldRef = std::variant<std::monostate, uint64_t*, int64_t*, double*, bool*, std::string*,
                              std::vector<std::string>*, std::vector<int64_t>*>;

struct ConfigKey {
  std::string section;  // "" for the top level
  std::string name;     // within the section: "batch_size"
  KeyType type = KeyType::Integer;
  std::function<FieldRef(Config&)> field;  // the Config field it fills
  std::string default_text;  // the default as YAML ("128", "0.1", "false", "fine", "[]")
  int64_t int_min = 0, int_max = 0;
  double min = 0, max = 0;
  std::vector<std::string> choices;
  std::function<std::vector<std::string>()> choices_from;  // names from a registry (optimizers, ...)
  bool required = false;
  std::vector<std::string> only_for;  // data keys: the datasets that read it (empty: every one)
  Style style = Style::Plain;
  bool unset_by_default = false;  // the default means "unset": the resolved config leaves it out
  // The resolved config leaves the key out (a key another rule refuses, later than only_for can).
  std::function<bool(const Config&)> unwritten_when;
  std::function<std::string(const Config&)> default_from;  // a default that depends on other keys
  std::string default_doc;  // the README's default when default_from is set
  // Runs right after the key is read: checks across its value that a range cannot state.
  std::function<void(Config&, config::Section&)> check;
  std::string help;

  std::string path() const { return section.empty() ? name : section + "." + name; }

  // Modifiers for the table.
  ConfigKey quoted() const;
  ConfigKey shortest() const;
  ConfigKey one_of(std::vector<std::string> c) const;
  ConfigKey one_of(std::function<std::vector<std::string>()> from) const;
  ConfigKey for_datasets(std::vector<std::string> datasets) const;
  ConfigKey then(std::function<void(Config&, config::Section&)> f) const;
  ConfigKey unwritten_if(std::function<bool(const Config&)> f) const;
};

// Every key, in the order the reader reads them and the unknown-key message lists them.
const std::vector<ConfigKey>& config_keys();
std::vector<const ConfigKey*> section_keys(const std::string& section);
std::vector<std::string> section_key_names(const std::string& section);
// The sections, in order: data, model, saved_tensors, optimizer, schedule, train, output, distributed.
std::vector<std::string> config_sections();

// optimizer.* and schedule.* keys are read by the optimizers / schedules that list them: the
// names of those that read `k` (empty: every one, or a section without kinds).
std::vector<std::string> key_readers(const ConfigKey& k);
// The keys the chosen optimizer or schedule reads in the order it lists them; for the other
// sections, nothing.
std::vector<std::string> chosen_kind_keys(const std::string& section, const Config& c);
// The value a key takes when the config leaves it out: default_from, else the chosen
// optimizer's own default (sgd lr 0.1, adamw 0.001), else default_text.
std::string default_for(const ConfigKey& k, const Config& c);
// The keys of `section` that `c` reads, in the order the resolved config writes them.
std::vector<const ConfigKey*> written_keys(const std::string& section, const Config& c);

// The README's table of keys (markdown), from the descriptors.
std::string config_keys_markdown();

}  // namespace packrat
