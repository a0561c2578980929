#include "experiments/lib/config_overrides.h"

#include <map>

namespace packrat::config {

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

namespace {

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

}  // namespace

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

}  // namespace packrat::config
