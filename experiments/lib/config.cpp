#include "experiments/lib/config.h"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "autograd/pointwise.h"
#include "core/device.h"
#include "core/error.h"
#include "data/transforms.h"
#include "models/registry.h"

namespace packrat {

namespace {

// Where the YAML came from and which dotted keys --set replaced.
struct Origin {
  std::string file;
  std::set<std::string> overridden;  // normalised paths: "data.batch_size", "saved_tensors.rules[0].bits"
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> text_archs() {
  std::vector<std::string> out;
  for (const auto& a : known_archs())
    if (takes_text(a)) out.push_back(a);
  return out;
}

// One mapping in the config: typed getters that remember which keys were read, and errors that
// name the key and its line.
class Section {
 public:
  Section(YAML::Node node, std::string path, const Origin& origin, YAML::Mark fallback)
      : node_(node), path_(std::move(path)), origin_(origin), fallback_(fallback) {
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
      error_at(path_, node_.Mark(), "must be a mapping of keys to values");
  }

  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // "file: key (line N): " or "--set key=...: " for values replaced on the command line.
  // The key was set on the command line, lies inside a value that was, or (with `holding`) holds
  // one that was: --set data.nope.x=1 makes the unknown key data.nope.
  std::string where(const std::string& full_key, const YAML::Mark& mark, bool holding = false) const {
    auto inside = [](const std::string& a, const std::string& b) {
      return a == b || a.rfind(b + ".", 0) == 0 || a.rfind(b + "[", 0) == 0;
    };
    for (const auto& o : origin_.overridden)
      if (inside(full_key, o) || (holding && inside(o, full_key))) return fmt::format("--set {}: {}", o, full_key);
    const YAML::Mark m = mark.is_null() ? fallback_ : mark;
    if (m.is_null()) return fmt::format("{}: {}", origin_.file, full_key);
    return fmt::format("{}: {} (line {})", origin_.file, full_key, m.line + 1);
  }
  [[noreturn]] void error_at(const std::string& full_key, const YAML::Mark& mark, const std::string& msg,
                             bool holding = false) const {
    fail("{}: {}", where(full_key, mark, holding), msg);
  }

  bool has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined() && !node_[key].IsNull(); }
  // A key written with no value ("batch_size:" or "~") is an error, not the default.
  YAML::Node raw(const std::string& key) {
    used_.insert(key);
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);  // the whole section is absent
    YAML::Node n = node_[key];
    if (n.IsDefined() && n.IsNull()) {
      YAML::Mark at = n.Mark();  // an empty value's own mark is where the next token starts
      for (auto it = node_.begin(); it != node_.end(); ++it)
        if (it->first.IsScalar() && it->first.Scalar() == key) at = it->first.Mark();
      error_at(key_path(key), at, "has no value: give one, or leave the key out to use the default");
    }
    return n;
  }
  YAML::Mark mark() const { return node_.IsDefined() && !node_.Mark().is_null() ? node_.Mark() : fallback_; }
  const std::string& path() const { return path_; }
  const Origin& origin() const { return origin_; }

  std::string scalar(const std::string& key, const YAML::Node& n, const char* what) const {
    if (!n.IsScalar()) error_at(key_path(key), n.Mark(), fmt::format("must be {}, got a {}", what, n.IsMap() ? "mapping" : "list"));
    return n.Scalar();
  }

  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
    YAML::Node n = raw(key);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    const std::string s = scalar(key, n, "an integer");
    int64_t v = 0;
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      error_at(key_path(key), n.Mark(), fmt::format("must be an integer in [{}, {}], got '{}'", min, max, s));
    }
    if (v < min || v > max)
      error_at(key_path(key), n.Mark(), fmt::format("must be an integer in [{}, {}], got {}", min, max, v));
    return v;
  }

  double get_double(const std::string& key, double fallback, double min, double max) {
    YAML::Node n = raw(key);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    return to_double(key_path(key), n, min, max);
  }
  double to_double(const std::string& full_key, const YAML::Node& n, double min, double max) const {
    if (!n.IsScalar()) error_at(full_key, n.Mark(), "must be a number");
    double v = 0;
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      error_at(full_key, n.Mark(), fmt::format("must be a number in [{}, {}], got '{}'", min, max, n.Scalar()));
    }
    if (!std::isfinite(v) || v < min || v > max)
      error_at(full_key, n.Mark(), fmt::format("must be a number in [{}, {}], got {}", min, max, n.Scalar()));
    return v;
  }

  bool get_bool(const std::string& key, bool fallback) {
    YAML::Node n = raw(key);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    const std::string s = scalar(key, n, "true or false");
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      error_at(key_path(key), n.Mark(), fmt::format("must be true or false, got '{}'", s));
    }
  }

  std::string get_string(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed = {}) {
    YAML::Node n = raw(key);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    const std::string s = scalar(key, n, "a string");
    if (!allowed.empty()) {
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == s;
      if (!ok) error_at(key_path(key), n.Mark(), fmt::format("is '{}', must be one of: {}", s, join(allowed)));
    }
    return s;
  }

  std::string require_string(const std::string& key) {
    if (!has(key)) error_at(key_path(key), mark(), "is required");
    return get_string(key, "");
  }

  std::vector<std::string> get_strings(const std::string& key, const std::vector<std::string>& fallback) {
    YAML::Node n = raw(key);
    if (!n.IsDefined() || n.IsNull()) return fallback;
    if (n.IsScalar()) return {n.Scalar()};  // a single item may be written without brackets
    if (!n.IsSequence()) error_at(key_path(key), n.Mark(), "must be a list of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar())
        error_at(fmt::format("{}[{}]", key_path(key), i), n[i].Mark(), "must be a string");
      out.push_back(n[i].Scalar());
    }
    return out;
  }

  Section child(const std::string& key) {
    YAML::Node n = raw(key);
    return Section(n, key_path(key), origin_, n.IsDefined() && !n.Mark().is_null() ? n.Mark() : mark());
  }

  // Throws on the first key no getter asked for, listing the known ones.
  void finish(const std::vector<std::string>& known) const {
    if (!node_.IsMap()) return;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (!used_.count(k)) {
        error_at(key_path(k), it->first.Mark(),
                 fmt::format("unknown key '{}'{}", k, known.empty() ? "" : "; known keys here: " + join(known)),
                 /*holding=*/true);
      }
    }
  }

  YAML::Node node() const { return node_; }

 private:
  YAML::Node node_;
  std::string path_;
  const Origin& origin_;
  YAML::Mark fallback_;
  std::set<std::string> used_;
};

// ---- duplicate keys ----------------------------------------------------------------------

// YAML parsers keep one of two equal keys in a mapping (yaml-cpp the first): a second `data:`
// section or a repeated key would be dropped without a word. Throws naming both lines.
void check_duplicate_keys(const YAML::Node& n, const std::string& path, const std::string& file) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_duplicate_keys(n[i], fmt::format("{}[{}]", path, i), file);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, int> first_line;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
    const std::string full = path.empty() ? k : path + "." + k;
    const int line = it->first.Mark().line + 1;
    auto [seen, fresh] = first_line.emplace(k, line);
    if (!fresh)
      fail("{}: {} (line {}): duplicate key '{}', first given on line {}; write each key once (merge the two)", file,
           full, line, k, seen->second);
    check_duplicate_keys(it->second, full, file);
  }
}

// ---- --set overrides -------------------------------------------------------------------

struct PathPart {
  std::string key;     // map key, or empty for an index
  int64_t index = -1;  // sequence index
};

// A sequence index from its digits; an index past any list length is an error naming the --set.
int64_t parse_index(const std::string& digits, const std::string& arg) {
  PACKRAT_CHECK(digits.size() <= 9, "--set {}: index {} is too large", arg, digits);
  return std::stoll(digits);
}

std::vector<PathPart> split_path(const std::string& dotted, const std::string& arg) {
  std::vector<PathPart> parts;
  size_t i = 0;
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    const bool numeric = cur.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && !parts.empty()) parts.push_back({"", parse_index(cur, arg)});
    else parts.push_back({cur, -1});
    cur.clear();
  };
  while (i < dotted.size()) {
    const char c = dotted[i];
    if (c == '.') {
      if (cur.empty() && (parts.empty() || dotted[i - 1] != ']')) fail("--set {}: empty key component", arg);
      flush();
      ++i;
    } else if (c == '[') {
      flush();
      const size_t close = dotted.find(']', i);
      PACKRAT_CHECK(close != std::string::npos && close > i + 1, "--set {}: unbalanced '['", arg);
      const std::string num = dotted.substr(i + 1, close - i - 1);
      PACKRAT_CHECK(num.find_first_not_of("0123456789") == std::string::npos, "--set {}: index '{}' is not a number", arg,
                    num);
      PACKRAT_CHECK(!parts.empty(), "--set {}: an index needs a key before it", arg);
      parts.push_back({"", parse_index(num, arg)});
      i = close + 1;
    } else {
      cur += c;
      ++i;
    }
  }
  if (!dotted.empty() && dotted.back() == '.') fail("--set {}: empty key component after the last '.'", arg);
  flush();
  PACKRAT_CHECK(!parts.empty(), "--set {}: empty key", arg);
  return parts;
}

std::string normalised(const std::vector<PathPart>& parts) {
  std::string s;
  for (const auto& p : parts) s += p.key.empty() ? fmt::format("[{}]", p.index) : (s.empty() ? "" : ".") + p.key;
  return s;
}

void apply_override(YAML::Node& root, const std::string& arg, Origin& origin) {
  const size_t eq = arg.find('=');
  PACKRAT_CHECK(eq != std::string::npos && eq > 0, "--set {}: expected key=value, e.g. --set data.batch_size=256", arg);
  const std::string key = arg.substr(0, eq), text = arg.substr(eq + 1);
  const auto parts = split_path(key, arg);
  PACKRAT_CHECK(text.find_first_not_of(" \t") != std::string::npos,
                "--set {}: no value after '=' (leave the --set out to keep the config's value)", arg);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception&) {
    value = YAML::Node(text);  // not valid YAML on its own: take it as a plain string
  }
  if (!value.IsDefined()) value = YAML::Node(YAML::NodeType::Null);

  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const auto& p = parts[i];
    YAML::Node next;
    if (p.key.empty()) {
      PACKRAT_CHECK(cur.IsSequence() && p.index < static_cast<int64_t>(cur.size()),
                    "--set {}: {} has no item [{}]", arg, normalised({parts.begin(), parts.begin() + static_cast<long>(i)}), p.index);
      next.reset(cur[static_cast<size_t>(p.index)]);
    } else {
      PACKRAT_CHECK(cur.IsMap() || cur.IsNull() || !cur.IsDefined(), "--set {}: '{}' is not a mapping", arg,
                    normalised({parts.begin(), parts.begin() + static_cast<long>(i)}));
      if (!cur[p.key].IsDefined() || cur[p.key].IsNull()) cur[p.key] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[p.key]);
    }
    cur.reset(next);
  }
  const auto& last = parts.back();
  if (last.key.empty()) {
    PACKRAT_CHECK(cur.IsSequence() && last.index < static_cast<int64_t>(cur.size()), "--set {}: {} has no item [{}]", arg,
                  normalised({parts.begin(), parts.end() - 1}), last.index);
    cur[static_cast<size_t>(last.index)] = value;
  } else {
    PACKRAT_CHECK(cur.IsMap() || cur.IsNull() || !cur.IsDefined(), "--set {}: '{}' is not a mapping", arg,
                  normalised({parts.begin(), parts.end() - 1}));
    cur[last.key] = value;
  }
  origin.overridden.insert(normalised(parts));
}

// ---- sections ----------------------------------------------------------------------------


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

Config parse_root(YAML::Node root, const Origin& origin) {
  if (!root.IsDefined() || root.IsNull()) fail("{}: the config is empty", origin.file);
  if (!root.IsMap()) fail("{}: the config must be a mapping of sections (seed, data, model, ...)", origin.file);
  Config c;
  c.source = origin.file;
  Section top(root, "", origin, root.Mark());
  c.seed = static_cast<uint64_t>(top.get_int("seed", 0, 0, INT64_MAX));
  c.threads = top.get_int("threads", 0, 0, 1024);
  c.device = top.get_string("device", "cpu");
  try {
    c.device = Device::parse(c.device).str();  // "cuda" -> "cuda:0"
  } catch (const Error&) {
    top.error_at("device", root["device"].Mark(), fmt::format("is '{}', must be cpu, cuda or cuda:N", c.device));
  }
  c.conv_algorithm = top.get_string("conv_algorithm", "auto", {"auto", "direct", "deterministic"});

  {
    Section d = top.child("data");
    if (!top.has("data")) top.error_at("data", root.Mark(), "section is required (at least data.dataset)");
    c.data.dataset = d.require_string("dataset");
    c.data.root = d.get_string("root", "");
    c.data.batch_size = d.get_int("batch_size", 128, 1, 1 << 20);
    c.data.eval_batch_size = d.get_int("eval_batch_size", 256, 1, 1 << 20);
    c.data.train_transforms = d.get_strings("train_transforms", {});
    c.data.test_transforms = d.get_strings("test_transforms", {});
    for (const char* k : {"train_transforms", "test_transforms"}) {
      try {
        data::parse_pipeline(std::string(k) == "train_transforms" ? c.data.train_transforms : c.data.test_transforms);
      } catch (const Error& e) {
        d.error_at(d.key_path(k), d.node()[k].Mark(), e.what());
      }
    }
    c.data.limit_train = d.get_int("limit_train", 0, 0, INT64_MAX);
    c.data.limit_test = d.get_int("limit_test", 0, 0, INT64_MAX);
    c.data.workers = d.get_int("workers", 1, 1, 64);
    c.data.prefetch = d.get_int("prefetch", 2, 1, 64);
    c.data.download = d.get_bool("download", false);
    c.data.label = d.get_string("label", "fine", {"fine", "coarse"});
    c.data.height = d.get_int("height", 0, 0, 1 << 16);
    c.data.width = d.get_int("width", 0, 0, 1 << 16);
    c.data.channels = d.get_int("channels", 3, 1, 3);
    if (c.data.channels == 2) d.error_at(d.key_path("channels"), d.node()["channels"].Mark(), "must be 1 or 3");
    c.data.seq_len = d.get_int("seq_len", 0, 0, 1 << 20);  // text; 0 is refused when the text is opened
    // Keys of one kind of dataset: written for another, they would be ignored.
    auto only_for = [&](const char* key, std::initializer_list<const char*> datasets) {
      if (!d.node().IsMap() || !d.node()[key].IsDefined()) return;
      for (const char* name : datasets)
        if (c.data.dataset == name) return;
      std::string names;
      for (const char* name : datasets) names += std::string(names.empty() ? "" : ", ") + name;
      d.error_at(d.key_path(key), d.node()[key].Mark(),
                 fmt::format("only applies to data.dataset {}, not {}: remove it", names, c.data.dataset));
    };
    only_for("download", {"cifar10", "cifar100"});
    only_for("label", {"cifar100"});
    for (const char* k : {"height", "width", "channels"}) only_for(k, {"image_folder"});
    only_for("seq_len", {"text"});
    d.finish({"dataset", "root", "batch_size", "eval_batch_size", "train_transforms", "test_transforms", "limit_train",
              "limit_test", "workers", "prefetch", "download", "label", "height", "width", "channels", "seq_len"});
  }
  {
    Section m = top.child("model");
    if (!top.has("model")) top.error_at("model", root.Mark(), "section is required (at least model.arch)");
    c.model.arch = m.require_string("arch");
    c.model.stem = m.get_string("stem", "", {"", "cifar", "imagenet"});
    c.model.activation = m.get_string("activation", default_activation(c.model.arch));
    if (!is_pointwise_name(c.model.activation))
      m.error_at(m.key_path("activation"), m.raw("activation").Mark(),
                 fmt::format("unknown activation '{}' (relu, leaky_relu, relu6, hardswish, gelu, silu, sigmoid, tanh, "
                             "selu, softplus, elu, mish, gelu_tanh)", c.model.activation));
    c.model.classes = m.get_int("classes", 0, 0, 1 << 20);
    c.model.in_channels = m.get_int("in_channels", 0, 0, 4096);
    c.model.image_size = m.get_int("image_size", 0, 0, 1 << 16);  // vit_*
    c.model.patch_size = m.get_int("patch_size", 0, 0, 1 << 16);
    c.model.width_mult = m.get_double("width_mult", 1.0, 1.0 / 64, 8.0);  // efficientnet_*
    c.model.depth_mult = m.get_double("depth_mult", 1.0, 1.0 / 64, 8.0);
    c.model.dropout = m.get_double("dropout", -1.0, 0.0, 0.99);  // unset: the preset's own
    c.model.attention_dropout = m.get_double("attention_dropout", -1.0, 0.0, 0.99);
    c.model.stochastic_depth = m.get_double("stochastic_depth", -1.0, 0.0, 0.99);
    if (!is_known_arch(c.model.arch))
      m.error_at(m.key_path("arch"), m.raw("arch").Mark(),
                 fmt::format("unknown architecture '{}' (known: {})", c.model.arch, fmt::join(known_archs(), ", ")));
    // A key the architecture does not read would be ignored without a word: refuse it whenever it
    // is written, whatever its value (model.width_mult: 1 on a ViT is as ignored as 0.5). Except
    // stem: "", which chooses no stem, the only way a --set can clear a base config's stem.
    const std::vector<std::string>& reads = model_keys(c.model.arch);
    for (const char* k : {"stem", "activation", "classes", "in_channels", "image_size", "patch_size", "width_mult",
                          "depth_mult", "dropout", "attention_dropout", "stochastic_depth"})
      if (m.node().IsMap() && m.node()[k].IsDefined() && std::find(reads.begin(), reads.end(), k) == reads.end() &&
          !(std::string(k) == "stem" && c.model.stem.empty()))
        m.error_at(m.key_path(k), m.node()[k].Mark(),
                   fmt::format("{} does not use this key (it reads model.arch, {}): remove it", c.model.arch,
                               join(reads)));
    m.finish({"arch", "stem", "activation", "classes", "in_channels", "image_size", "patch_size", "width_mult",
              "depth_mult", "dropout", "attention_dropout", "stochastic_depth"});
  }
  // The GPTs read token sequences, every other model images: a mismatch would fail deep inside the
  // first layer (or blame model.image_size, which the user never set).
  if (c.data.dataset == "text" && !takes_text(c.model.arch))
    top.error_at("data.dataset", root["data"]["dataset"].Mark(),
                 fmt::format("is text (token sequences), but model.arch {} takes images; the models that take text "
                             "are the GPTs: {}", c.model.arch, join(text_archs())));
  if (c.data.dataset != "text" && takes_text(c.model.arch))
    top.error_at("model.arch", root["model"]["arch"].Mark(),
                 fmt::format("{} takes text (data.dataset: text), but data.dataset is {} (images)", c.model.arch,
                             c.data.dataset));
  // Tokens take no transforms (after the model check: an image config switched to text data is
  // told about its model first). The loader would refuse them only once the text is open.
  if (c.data.dataset == "text")
    for (const char* k : {"train_transforms", "test_transforms"})
      if (root["data"][k].IsDefined())
        top.error_at(std::string("data.") + k, root["data"][k].Mark(),
                     "only applies to data.dataset cifar10, cifar100, fashion_mnist, mnist, image_folder, not text: "
                     "remove it");
  c.saved_tensors = parse_saved_tensors(top.child("saved_tensors"));
  c.saved_tensors.seed = c.seed;
  {
    Section o = top.child("optimizer");
    c.optimizer.name = o.get_string("name", "sgd", {"sgd", "adamw"});
    c.optimizer.lr = o.get_double("lr", c.optimizer.name == "sgd" ? 0.1 : 1e-3, 0, 100);
    c.optimizer.momentum = o.get_double("momentum", c.optimizer.name == "sgd" ? 0.9 : 0.0, 0, 1);
    c.optimizer.nesterov = o.get_bool("nesterov", false);
    c.optimizer.weight_decay = o.get_double("weight_decay", c.optimizer.name == "sgd" ? 0.0 : 0.01, 0, 10);
    c.optimizer.beta1 = o.get_double("beta1", 0.9, 0, 0.999999);
    c.optimizer.beta2 = o.get_double("beta2", 0.999, 0, 0.999999999);
    c.optimizer.eps = o.get_double("eps", 1e-8, 0, 1);
    if (c.optimizer.name == "sgd") {
      for (const char* k : {"beta1", "beta2", "eps"})
        if (o.has(k)) o.error_at(o.key_path(k), o.node()[k].Mark(), "is an adamw option; optimizer.name is sgd");
      if (c.optimizer.nesterov && c.optimizer.momentum <= 0)
        o.error_at(o.key_path("nesterov"), o.node()["nesterov"].Mark(), "nesterov needs momentum > 0");
    } else {
      for (const char* k : {"momentum", "nesterov"})
        if (o.has(k)) o.error_at(o.key_path(k), o.node()[k].Mark(), "is an sgd option; optimizer.name is adamw");
    }
    o.finish({"name", "lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps"});
  }
  {
    Section s = top.child("schedule");
    c.schedule.name = s.get_string("name", "constant", {"constant", "step", "multistep", "cosine"});
    c.schedule.warmup_epochs = s.get_double("warmup_epochs", 0, 0, 1e6);
    c.schedule.min_lr = s.get_double("min_lr", 0, 0, 100);
    c.schedule.step_size = s.get_int("step_size", 30, 1, 1000000);
    c.schedule.gamma = s.get_double("gamma", 0.1, 0, 1);
    YAML::Node ms = s.raw("milestones");
    if (ms.IsDefined() && !ms.IsNull()) {
      if (!ms.IsSequence()) s.error_at(s.key_path("milestones"), ms.Mark(), "must be a list of epochs, e.g. [30, 60]");
      for (size_t i = 0; i < ms.size(); ++i) {
        int64_t v = -1;
        try {
          v = ms[i].as<int64_t>();
        } catch (const YAML::Exception&) {
        }
        if (v < 1) s.error_at(fmt::format("{}[{}]", s.key_path("milestones"), i), ms[i].Mark(), "must be an epoch >= 1");
        if (!c.schedule.milestones.empty() && v <= c.schedule.milestones.back())
          s.error_at(s.key_path("milestones"), ms.Mark(), "must be increasing");
        c.schedule.milestones.push_back(v);
      }
    }
    auto only_for = [&](const char* key, const char* kind) {
      if (s.has(key) && c.schedule.name != kind)
        s.error_at(s.key_path(key), s.node()[key].Mark(), fmt::format("only applies to schedule.name: {}", kind));
    };
    only_for("milestones", "multistep");
    only_for("step_size", "step");
    only_for("min_lr", "cosine");
    if (s.has("gamma") && c.schedule.name != "step" && c.schedule.name != "multistep")
      s.error_at(s.key_path("gamma"), s.node()["gamma"].Mark(), "only applies to schedule.name: step or multistep");
    if (c.schedule.name == "multistep" && c.schedule.milestones.empty())
      s.error_at(s.key_path("milestones"), s.mark(), "a multistep schedule needs milestones (epochs), e.g. [30, 60]");
    s.finish({"name", "warmup_epochs", "min_lr", "step_size", "milestones", "gamma"});
  }
  {
    Section t = top.child("train");
    c.train.epochs = t.get_int("epochs", 1, 1, 100000);
    c.train.label_smoothing = t.get_double("label_smoothing", 0, 0, 0.999);
    c.train.clip_grad_norm = t.get_double("clip_grad_norm", 0, 0, 1e9);
    c.train.eval_interval = t.get_int("eval_interval", 1, 1, 100000);
    c.train.steps_per_epoch = t.get_int("steps_per_epoch", 0, 0, INT64_MAX);
    c.train.log_interval = t.get_int("log_interval", 50, 1, INT64_MAX);
    t.finish({"epochs", "label_smoothing", "clip_grad_norm", "eval_interval", "steps_per_epoch", "log_interval"});
  }
  {
    Section o = top.child("output");
    c.output.dir = o.get_string("dir", "runs/run");
    if (c.output.dir.empty()) o.error_at(o.key_path("dir"), o.mark(), "must not be empty");
    c.output.checkpoint_interval = o.get_int("checkpoint_interval", 1, 0, 100000);
    o.finish({"dir", "checkpoint_interval"});
  }
  {
    Section d = top.child("distributed");
    c.distributed.backend = d.get_string("backend", "auto", {"auto", "mpi", "nccl"});
    c.distributed.timeout_s = d.get_double("timeout_s", 300, 0.1, 1e6);
    c.distributed.sync_batchnorm = d.get_bool("sync_batchnorm", false);
    c.distributed.bucket_bytes = d.get_int("bucket_bytes", int64_t{1} << 20, 4, int64_t{1} << 31);
    c.distributed.overlap = d.get_bool("overlap", true);
    d.finish({"backend", "timeout_s", "sync_batchnorm", "bucket_bytes", "overlap"});
  }
  top.finish({"seed", "threads", "device", "conv_algorithm", "data", "model", "saved_tensors", "optimizer", "schedule", "train",
              "output", "distributed"});

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

}  // namespace

namespace {

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
  check_duplicate_keys(root, "", source);
  if (earlier_run_config) drop_earlier_resolved_defaults(root);
  if (!overrides.empty()) {
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    PACKRAT_CHECK(root.IsMap(), "{}: the config must be a mapping of sections", source);
    for (const auto& o : overrides) apply_override(root, o, origin);
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

namespace {
void emit_scheme(YAML::Emitter& e, const SchemeSpec& s) {
  e << YAML::Key << "scheme" << YAML::Value << s.scheme;
  for (const auto& [k, v] : s.options) e << YAML::Key << k << YAML::Value << v;
}
void emit_list(YAML::Emitter& e, const std::vector<std::string>& v) {
  e << YAML::Flow << YAML::BeginSeq;
  for (const auto& x : v) e << YAML::DoubleQuoted << x;
  e << YAML::EndSeq;
}
std::string num(double v) { return fmt::format("{}", v); }  // shortest round-trip form
}  // namespace

std::string config_to_yaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "seed" << YAML::Value << c.seed;
  e << YAML::Key << "threads" << YAML::Value << c.threads;
  e << YAML::Key << "device" << YAML::Value << c.device;
  e << YAML::Key << "conv_algorithm" << YAML::Value << c.conv_algorithm;

  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "dataset" << YAML::Value << c.data.dataset;
  e << YAML::Key << "root" << YAML::Value << YAML::DoubleQuoted << c.data.root;
  e << YAML::Key << "batch_size" << YAML::Value << c.data.batch_size;
  e << YAML::Key << "eval_batch_size" << YAML::Value << c.data.eval_batch_size;
  if (c.data.dataset != "text") {
    e << YAML::Key << "train_transforms" << YAML::Value;
    emit_list(e, c.data.train_transforms);
    e << YAML::Key << "test_transforms" << YAML::Value;
    emit_list(e, c.data.test_transforms);
  }
  e << YAML::Key << "limit_train" << YAML::Value << c.data.limit_train;
  e << YAML::Key << "limit_test" << YAML::Value << c.data.limit_test;
  e << YAML::Key << "workers" << YAML::Value << c.data.workers;
  e << YAML::Key << "prefetch" << YAML::Value << c.data.prefetch;
  // The dataset's own keys only: parse_config refuses the others.
  const std::string& ds = c.data.dataset;
  if (ds == "cifar10" || ds == "cifar100") e << YAML::Key << "download" << YAML::Value << c.data.download;
  if (ds == "cifar100") e << YAML::Key << "label" << YAML::Value << c.data.label;
  if (ds == "image_folder") {
    e << YAML::Key << "height" << YAML::Value << c.data.height;
    e << YAML::Key << "width" << YAML::Value << c.data.width;
    e << YAML::Key << "channels" << YAML::Value << c.data.channels;
  }
  if (ds == "text") e << YAML::Key << "seq_len" << YAML::Value << c.data.seq_len;
  e << YAML::EndMap;

  // Only the keys the architecture reads: parse_config refuses the others.
  const std::vector<std::string>& reads = model_keys(c.model.arch);
  auto uses = [&](const char* key) { return std::find(reads.begin(), reads.end(), key) != reads.end(); };
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "arch" << YAML::Value << c.model.arch;
  if (uses("stem")) e << YAML::Key << "stem" << YAML::Value << YAML::DoubleQuoted << c.model.stem;
  e << YAML::Key << "activation" << YAML::Value << YAML::DoubleQuoted << c.model.activation;
  e << YAML::Key << "classes" << YAML::Value << c.model.classes;
  if (uses("in_channels")) e << YAML::Key << "in_channels" << YAML::Value << c.model.in_channels;
  if (uses("image_size")) e << YAML::Key << "image_size" << YAML::Value << c.model.image_size;
  if (uses("patch_size")) e << YAML::Key << "patch_size" << YAML::Value << c.model.patch_size;
  if (uses("width_mult")) e << YAML::Key << "width_mult" << YAML::Value << c.model.width_mult;
  if (uses("depth_mult")) e << YAML::Key << "depth_mult" << YAML::Value << c.model.depth_mult;
  for (const auto& [key, v] : {std::pair{"dropout", c.model.dropout}, std::pair{"attention_dropout", c.model.attention_dropout},
                               std::pair{"stochastic_depth", c.model.stochastic_depth}})
    if (v >= 0 && uses(key)) e << YAML::Key << key << YAML::Value << v;  // unset keys stay unset: the preset's own
  e << YAML::EndMap;

  e << YAML::Key << "saved_tensors" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "default" << YAML::Value << YAML::Flow << YAML::BeginMap;
  emit_scheme(e, c.saved_tensors.default_scheme);
  e << YAML::EndMap;
  e << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : c.saved_tensors.rules) {
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

  e << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << c.optimizer.name;
  e << YAML::Key << "lr" << YAML::Value << num(c.optimizer.lr);
  if (c.optimizer.name == "sgd") {
    e << YAML::Key << "momentum" << YAML::Value << num(c.optimizer.momentum);
    e << YAML::Key << "nesterov" << YAML::Value << c.optimizer.nesterov;
  } else {
    e << YAML::Key << "beta1" << YAML::Value << num(c.optimizer.beta1);
    e << YAML::Key << "beta2" << YAML::Value << num(c.optimizer.beta2);
    e << YAML::Key << "eps" << YAML::Value << num(c.optimizer.eps);
  }
  e << YAML::Key << "weight_decay" << YAML::Value << num(c.optimizer.weight_decay);
  e << YAML::EndMap;

  e << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << c.schedule.name;
  e << YAML::Key << "warmup_epochs" << YAML::Value << num(c.schedule.warmup_epochs);
  if (c.schedule.name == "cosine") e << YAML::Key << "min_lr" << YAML::Value << num(c.schedule.min_lr);
  if (c.schedule.name == "step") e << YAML::Key << "step_size" << YAML::Value << c.schedule.step_size;
  if (c.schedule.name == "multistep") {
    e << YAML::Key << "milestones" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int64_t m : c.schedule.milestones) e << m;
    e << YAML::EndSeq;
  }
  if (c.schedule.name == "step" || c.schedule.name == "multistep")
    e << YAML::Key << "gamma" << YAML::Value << num(c.schedule.gamma);
  e << YAML::EndMap;

  e << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "epochs" << YAML::Value << c.train.epochs;
  e << YAML::Key << "label_smoothing" << YAML::Value << num(c.train.label_smoothing);
  e << YAML::Key << "clip_grad_norm" << YAML::Value << num(c.train.clip_grad_norm);
  e << YAML::Key << "eval_interval" << YAML::Value << c.train.eval_interval;
  e << YAML::Key << "steps_per_epoch" << YAML::Value << c.train.steps_per_epoch;
  e << YAML::Key << "log_interval" << YAML::Value << c.train.log_interval;
  e << YAML::EndMap;

  e << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "dir" << YAML::Value << YAML::DoubleQuoted << c.output.dir;
  e << YAML::Key << "checkpoint_interval" << YAML::Value << c.output.checkpoint_interval;
  e << YAML::EndMap;

  e << YAML::Key << "distributed" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "backend" << YAML::Value << c.distributed.backend;
  e << YAML::Key << "timeout_s" << YAML::Value << num(c.distributed.timeout_s);
  e << YAML::Key << "sync_batchnorm" << YAML::Value << c.distributed.sync_batchnorm;
  e << YAML::Key << "bucket_bytes" << YAML::Value << c.distributed.bucket_bytes;
  e << YAML::Key << "overlap" << YAML::Value << c.distributed.overlap;
  e << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace packrat
