#pragma once
// Options of one storage scheme as written in the config (`{scheme: actnn, bits: 2, group_size: 256}`),
// with typed getters whose errors name the key and where it was written.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace packrat {

class SchemeOptions {
 public:
  // where: e.g. "saved_tensors.rules[1] (line 14)"; used in every error message.
  SchemeOptions(std::map<std::string, std::string> values, std::string where);

  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  double get_double(const std::string& key, double fallback, double min, double max);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed);
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // Throws naming the first key no getter asked for (a typo, or a key of another scheme).
  void check_all_used() const;
  const std::string& where() const { return where_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::string where_;
};

}  // namespace packrat
