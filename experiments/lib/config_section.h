#pragma once
// Reading one mapping of a config (experiments/lib/config.h) with yaml-cpp: typed getters that
// remember which keys were read, and errors that name the file, the dotted key and its line, or
// the --set that gave the value. Internal to the config reader.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace packrat::config {

// Where the YAML came from and which dotted keys --set replaced.
struct Origin {
  std::string file;
  std::set<std::string> overridden;  // normalised paths: "data.batch_size", "saved_tensors.rules[0].bits"
};

// "a, b, c", or with another separator "step or multistep".
inline std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
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

  // A list of increasing epochs >= 1 (schedule.milestones); absent: empty.
  std::vector<int64_t> get_epochs(const std::string& key) {
    std::vector<int64_t> out;
    YAML::Node ms = raw(key);
    if (!ms.IsDefined() || ms.IsNull()) return out;
    if (!ms.IsSequence()) error_at(key_path(key), ms.Mark(), "must be a list of epochs, e.g. [30, 60]");
    for (size_t i = 0; i < ms.size(); ++i) {
      int64_t v = -1;
      try {
        v = ms[i].as<int64_t>();
      } catch (const YAML::Exception&) {
      }
      if (v < 1) error_at(fmt::format("{}[{}]", key_path(key), i), ms[i].Mark(), "must be an epoch >= 1");
      if (!out.empty() && v <= out.back()) error_at(key_path(key), ms.Mark(), "must be increasing");
      out.push_back(v);
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

}  // namespace packrat::config
