// The config reader: YAML text -> Config, key by key from the descriptors (config_key.h), then
// the checks across keys and sections.
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "experiments/lib/config.h"
#include "experiments/lib/config_key.h"
#include "experiments/lib/config_layers.h"
#include "experiments/lib/config_offload.h"
#include "experiments/lib/config_overrides.h"
#include "experiments/lib/config_saved_tensors.h"
#include "experiments/lib/config_section.h"

namespace packrat {

namespace {

using config::join;
using config::Origin;
using config::Section;

// Reads one key into its field: the value's type and range are checked by the Section getters.
void read_key(const ConfigKey& k, Section& s, Config& c) {
  if (k.type == KeyType::Custom) return;  // its section's own code reads it (memory.offload)
  const std::string def = default_for(k, c);
  const FieldRef f = k.field(c);
  const std::string& n = k.name;
  switch (k.type) {
    case KeyType::Integer: {
      const int64_t v = s.get_int(n, std::stoll(def), k.int_min, k.int_max);
      if (auto* p = std::get_if<uint64_t*>(&f)) **p = static_cast<uint64_t>(v);
      else *std::get<int64_t*>(f) = v;
      break;
    }
    case KeyType::Number: *std::get<double*>(f) = s.get_double(n, std::stod(def), k.min, k.max); break;
    case KeyType::Boolean: *std::get<bool*>(f) = s.get_bool(n, def == "true"); break;
    case KeyType::Text:
      *std::get<std::string*>(f) = k.required ? s.require_string(n)
                                              : s.get_string(n, def, k.choices_from ? k.choices_from() : k.choices);
      break;
    case KeyType::TextList: *std::get<std::vector<std::string>*>(f) = s.get_strings(n, {}); break;
    case KeyType::EpochList: *std::get<std::vector<int64_t>*>(f) = s.get_epochs(n); break;
    case KeyType::Custom: return;  // its section's own code reads it
  }
  if (k.check) k.check(c, s);
}

void read_keys(Section& s, const std::string& section, Config& c) {
  for (const ConfigKey* k : section_keys(section)) read_key(*k, s, c);
}

bool written(const Section& s, const std::string& key) { return s.node().IsMap() && s.node()[key].IsDefined(); }

// Keys of one kind of dataset (data.seq_len, train.task, ...): written for another, they would be ignored.
void refuse_other_datasets_keys(Section& d, const std::string& section, const Config& c) {
  for (const ConfigKey* k : section_keys(section)) {
    if (k->only_for.empty() || !written(d, k->name)) continue;
    if (std::find(k->only_for.begin(), k->only_for.end(), c.data.dataset) != k->only_for.end()) continue;
    d.error_at(d.key_path(k->name), d.node()[k->name].Mark(),
               fmt::format("only applies to data.dataset {}, not {}: remove it", join(k->only_for), c.data.dataset));
  }
}

// A key the architecture does not read would be ignored without a word: refuse it whenever it
// is written, whatever its value (model.width_mult: 1 on a ViT is as ignored as 0.5). Except
// stem: "", which chooses no stem, the only way a --set can clear a base config's stem.
void refuse_keys_the_model_ignores(Section& m, const Config& c) {
  const std::vector<std::string>& reads = model_keys(c.model.arch);
  for (const ConfigKey* k : section_keys("model")) {
    if (k->name == "arch" || !written(m, k->name)) continue;
    if (std::find(reads.begin(), reads.end(), k->name) != reads.end()) continue;
    if (k->name == "stem" && c.model.stem.empty()) continue;
    m.error_at(m.key_path(k->name), m.node()[k->name].Mark(),
               fmt::format("{} does not use this key (it reads model.arch, {}): remove it", c.model.arch, join(reads)));
  }
}

// model.layers, for an architecture that reads it (the others refuse it above): required there.
void read_model_layers(Section& m, Config& c) {
  const std::vector<std::string>& reads = model_keys(c.model.arch);
  if (std::find(reads.begin(), reads.end(), "layers") == reads.end()) return;
  c.model.layers = config::parse_layers(m);
  if (c.model.layers.empty())
    m.error_at(m.key_path("layers"), m.mark(),
               fmt::format("is required for model.arch {}: the model's layers, e.g. [conv2d(32, 3, padding=1), "
                           "batchnorm2d, relu, adaptive_avgpool2d(1), flatten, linear(10)]",
                           c.model.arch));
}

// optimizer.* / schedule.* keys that only other optimizers / schedules read.
void refuse_other_kinds_keys(Section& s, const std::string& section, const Config& c) {
  const std::string& chosen = section == "optimizer" ? c.optimizer.name : c.schedule.name;
  for (const ConfigKey* k : section_keys(section)) {
    const std::vector<std::string> readers = key_readers(*k);
    if (readers.empty() || !s.has(k->name)) continue;
    if (std::find(readers.begin(), readers.end(), chosen) != readers.end()) continue;
    const std::string msg = section == "optimizer"
                                ? fmt::format("is an {} option; optimizer.name is {}", join(readers, " or "), chosen)
                                : fmt::format("only applies to schedule.name: {}", join(readers, " or "));
    s.error_at(s.key_path(k->name), s.node()[k->name].Mark(), msg);
  }
}

std::vector<std::string> text_archs(bool (*kind)(const std::string&)) {
  std::vector<std::string> out;
  for (const auto& a : known_archs())
    if (kind(a)) out.push_back(a);
  return out;
}

std::string list_or_none(const std::vector<std::string>& archs) {
  return archs.empty() ? std::string("none is registered") : join(archs);
}

// Which models a dataset takes: token sequences (text: the GPTs and the text encoders;
// text_classes: the encoders) or images (the others). A mismatch would fail deep inside the first
// layer (or blame model.image_size, which the user never set).
void check_data_fits_model(Section& top, const YAML::Node& root, const Config& c) {
  const std::string& arch = c.model.arch;
  const bool text = c.data.dataset == "text", classes = c.data.dataset == "text_classes";
  if (text && !takes_text(arch))
    top.error_at("data.dataset", root["data"]["dataset"].Mark(),
                 fmt::format("is text (token sequences), but model.arch {} takes images; the models that take text: "
                             "{}", arch, join(text_archs(takes_text))));
  if (classes && !encodes_text(arch))
    top.error_at("data.dataset", root["data"]["dataset"].Mark(),
                 fmt::format("is text_classes (token sequences to classify), but model.arch {} is no text encoder; the "
                             "text encoders (models/registry.h: ModelKind::encodes_text): {}",
                             arch, list_or_none(text_archs(encodes_text))));
  if (!text && !classes && takes_text(arch))
    top.error_at("model.arch", root["model"]["arch"].Mark(),
                 fmt::format("{} takes text (data.dataset: {}), but data.dataset is {} (images)", arch,
                             encodes_text(arch) ? "text or text_classes" : "text", c.data.dataset));
}

// train.task on text: next_token needs a causal model (a GPT), mlm a bidirectional encoder.
void check_text_task(Section& t, const Config& c) {
  if (c.data.dataset != "text") return;
  const std::string& arch = c.model.arch;
  const YAML::Mark at = t.has("task") ? t.node()["task"].Mark() : t.mark();
  if (c.train.task == "mlm" && !encodes_text(arch))
    t.error_at(t.key_path("task"), at,
               fmt::format("is mlm (masked bytes, predicted from both sides), but model.arch {} is causal: it learns "
                           "next_token; the text encoders: {}",
                           arch, list_or_none(text_archs(encodes_text))));
  if (c.train.task == "next_token" && encodes_text(arch))
    t.error_at(t.key_path("task"), at,
               fmt::format("is next_token, but model.arch {} is a bidirectional text encoder (it would see the byte "
                           "it predicts): use train.task: mlm",
                           arch));
}

// The sections with nothing but their keys' own checks.
void read_plain_section(Section& top, const std::string& section, Config& c) {
  Section s = top.child(section);
  read_keys(s, section, c);
  s.finish(section_key_names(section));
}

Config parse_root(YAML::Node root, const Origin& origin) {
  if (!root.IsDefined() || root.IsNull()) fail("{}: the config is empty", origin.file);
  if (!root.IsMap()) fail("{}: the config must be a mapping of sections (seed, data, model, ...)", origin.file);
  Config c;
  c.source = origin.file;
  Section top(root, "", origin, root.Mark());
  read_keys(top, "", c);
  {
    Section d = top.child("data");
    if (!top.has("data")) top.error_at("data", root.Mark(), "section is required (at least data.dataset)");
    read_keys(d, "data", c);
    refuse_other_datasets_keys(d, "data", c);
    d.finish(section_key_names("data"));
  }
  {
    Section m = top.child("model");
    if (!top.has("model")) top.error_at("model", root.Mark(), "section is required (at least model.arch)");
    read_keys(m, "model", c);
    if (!is_known_arch(c.model.arch))
      m.error_at(m.key_path("arch"), m.raw("arch").Mark(),
                 fmt::format("unknown architecture '{}' (known: {})", c.model.arch, fmt::join(known_archs(), ", ")));
    refuse_keys_the_model_ignores(m, c);
    read_model_layers(m, c);
    m.finish(section_key_names("model"));
  }
  check_data_fits_model(top, root, c);
  // Tokens take no transforms (after the model check: an image config switched to text data is
  // told about its model first). The loader would refuse them only once the text is open.
  if (c.data.dataset == "text" || c.data.dataset == "text_classes")
    for (const char* k : {"train_transforms", "test_transforms"})
      if (root["data"][k].IsDefined())
        top.error_at(std::string("data.") + k, root["data"][k].Mark(),
                     fmt::format("only applies to data.dataset cifar10, cifar100, fashion_mnist, mnist, image_folder, "
                                 "not {}: remove it",
                                 c.data.dataset));
  {
    Section s = top.child("saved_tensors");
    c.saved_tensors = config::parse_saved_tensors(s);
    c.saved_tensors.seed = c.seed;
  }
  {
    Section o = top.child("optimizer");
    read_keys(o, "optimizer", c);
    refuse_other_kinds_keys(o, "optimizer", c);
    if (const OptimizerKind* kind = optimizers().find(c.optimizer.name); kind && kind->check)
      if (const auto refusal = kind->check(c.optimizer))
        o.error_at(o.key_path(refusal->key), o.node()[refusal->key].Mark(), refusal->message);
    o.finish(section_key_names("optimizer"));
  }
  {
    Section s = top.child("schedule");
    read_keys(s, "schedule", c);
    refuse_other_kinds_keys(s, "schedule", c);
    const std::vector<std::string> reads = chosen_kind_keys("schedule", c);
    if (std::find(reads.begin(), reads.end(), "milestones") != reads.end() && c.schedule.milestones.empty())
      s.error_at(s.key_path("milestones"), s.mark(),
                 fmt::format("a {} schedule needs milestones (epochs), e.g. [30, 60]", c.schedule.name));
    s.finish(section_key_names("schedule"));
  }
  {
    Section t = top.child("train");
    read_keys(t, "train", c);
    refuse_other_datasets_keys(t, "train", c);
    check_text_task(t, c);
    t.finish(section_key_names("train"));
  }
  for (const char* section : {"output", "distributed"}) read_plain_section(top, section, c);
  {
    Section m = top.child("memory");
    read_keys(m, "memory", c);
    c.memory.offload = config::parse_offload(m);
    m.finish(section_key_names("memory"));
    if (c.memory.plan == "auto" && c.memory.budget_bytes == 0)
      fail("{}: memory.plan is auto, which needs memory.budget: the bytes a step may hold, with a unit (384M, 16G)",
           origin.file);
  }
  std::vector<std::string> top_keys = section_key_names("");
  for (const std::string& s : config_sections()) top_keys.push_back(s);
  top.finish(top_keys);

  // Build the store policy once so that an unknown scheme or a bad scheme option is reported now.
  try {
    RulePolicy check(c.saved_tensors);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind("--set", 0) == 0) throw;
    fail("{}: {}", origin.file, msg);
  }
  return c;
}

// Keys that config_to_yaml of earlier versions wrote into every run's config.yaml, whatever the
// model, dataset or schedule, with the value that meant "unset" (each is also the key's default).
struct ResolvedDefault {
  const char* section;
  const char* key;
  const char* value;  // "[]": an empty list
};
constexpr ResolvedDefault kEarlierResolvedDefaults[] = {
    {"model", "stem", ""},        {"model", "in_channels", "0"}, {"model", "image_size", "0"},
    {"model", "patch_size", "0"}, {"model", "width_mult", "1"},  {"model", "depth_mult", "1"},
    {"data", "download", "false"}, {"data", "label", "fine"},    {"data", "height", "0"},
    {"data", "width", "0"},       {"data", "channels", "3"},     {"data", "seq_len", "0"},
    {"data", "train_transforms", "[]"}, {"data", "test_transforms", "[]"}, {"schedule", "gamma", "0.1"}};

// Drops those keys where they hold that value: the same config (each is its key's default), but
// one the keys check no longer refuses where the model, dataset or schedule does not read them.
void drop_earlier_resolved_defaults(YAML::Node& root) {
  if (!root.IsMap()) return;
  for (const ResolvedDefault& d : kEarlierResolvedDefaults) {
    YAML::Node section = root[d.section];
    if (!section.IsMap() || !section[d.key].IsDefined()) continue;
    const YAML::Node v = section[d.key];
    const bool unset = std::string(d.value) == "[]" ? v.IsSequence() && v.size() == 0
                                                    : v.IsScalar() && v.Scalar() == d.value;
    if (unset) section.remove(d.key);
  }
}

Config parse_text(const std::string& yaml_text, const std::string& source, const std::vector<std::string>& overrides,
                  bool earlier_run_config) {
  Origin origin{source, {}};
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail("{}: YAML syntax error at line {}, column {}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  config::check_duplicate_keys(root, "", source);
  if (earlier_run_config) drop_earlier_resolved_defaults(root);
  config::join_split_layers(root);  // before --set: model.layers[i] is the i-th layer
  if (!overrides.empty()) {
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    PACKRAT_CHECK(root.IsMap(), "{}: the config must be a mapping of sections", source);
    for (const auto& o : overrides) config::apply_override(root, o, origin);
  }
  return parse_root(root, origin);
}

std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory, not a config file", path);
  std::ifstream in(path);
  if (!in) fail("{}: cannot read the config file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source, const std::vector<std::string>& overrides) {
  return parse_text(yaml_text, source, overrides, false);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_text(read_config_file(path), path, overrides, false);
}

Config load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_text(read_config_file(path), path, overrides, true);
}

}  // namespace packrat
