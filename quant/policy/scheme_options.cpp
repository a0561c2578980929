#include "quant/policy/scheme_options.h"

#include <charconv>

#include "core/error.h"

namespace packrat {

SchemeOptions::SchemeOptions(std::map<std::string, std::string> values, std::string where)
    : values_(std::move(values)), where_(std::move(where)) {}

int64_t SchemeOptions::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  const auto& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  PACKRAT_CHECK(ec == std::errc() && end == s.data() + s.size(), "{}: '{}' must be an integer, got '{}'", where_, key, s);
  PACKRAT_CHECK(v >= min && v <= max, "{}: '{}' is {}, must be in [{}, {}]", where_, key, v, min, max);
  return v;
}

double SchemeOptions::get_double(const std::string& key, double fallback, double min, double max) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  PACKRAT_CHECK(pos == it->second.size() && pos > 0, "{}: '{}' must be a number, got '{}'", where_, key, it->second);
  PACKRAT_CHECK(v >= min && v <= max, "{}: '{}' is {}, must be in [{}, {}]", where_, key, v, min, max);
  return v;
}

bool SchemeOptions::get_bool(const std::string& key, bool fallback) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  fail("{}: '{}' must be true or false, got '{}'", where_, key, it->second);
}

std::string SchemeOptions::get_string(const std::string& key, const std::string& fallback,
                                      const std::vector<std::string>& allowed) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (allowed.empty()) return it->second;
  for (const auto& a : allowed)
    if (a == it->second) return a;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail("{}: '{}' is '{}', must be one of: {}", where_, key, it->second, list);
}

void SchemeOptions::check_all_used() const {
  for (const auto& [k, v] : values_)
    PACKRAT_CHECK(used_.count(k), "{}: unknown key '{}' for this scheme", where_, k);
}

}  // namespace packrat
