// A key's default is stated twice: as text in its descriptor (what the reader fills in, the
// resolved config and the README show) and as the initializer of the field it fills (what code
// that builds a Config{} directly gets). They must agree.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "experiments/lib/config_key.h"

namespace packrat {
namespace {

std::string unquoted(std::string s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) return s.substr(1, s.size() - 2);
  return s;
}

TEST(ConfigKeys, FieldInitializersAreTheDescriptorsDefaults) {
  Config c;  // every field at its initializer
  int checked = 0;
  for (const ConfigKey& k : config_keys()) {
    // Keys without one fixed default: required, "unset", derived from other keys, read by their
    // own section's code, or whose default is the chosen optimizer's or schedule's.
    if (k.required || k.unset_by_default || k.default_from || k.type == KeyType::Custom || !key_readers(k).empty())
      continue;
    const FieldRef f = k.field(c);
    const std::string d = unquoted(k.default_text);
    SCOPED_TRACE(k.path() + " (descriptor default " + k.default_text + ")");
    if (auto p = std::get_if<int64_t*>(&f)) {
      EXPECT_EQ(**p, std::stoll(d));
    } else if (auto p = std::get_if<uint64_t*>(&f)) {
      EXPECT_EQ(**p, std::stoull(d));
    } else if (auto p = std::get_if<double*>(&f)) {
      EXPECT_DOUBLE_EQ(**p, std::stod(d));
    } else if (auto p = std::get_if<bool*>(&f)) {
      EXPECT_EQ(**p, d == "true");
    } else if (auto p = std::get_if<std::string*>(&f)) {
      EXPECT_EQ(**p, d);
    } else if (auto p = std::get_if<std::vector<std::string>*>(&f)) {
      EXPECT_TRUE(d == "[]" && (*p)->empty()) << "a list default other than [] is not checked here";
    } else if (auto p = std::get_if<std::vector<int64_t>*>(&f)) {
      EXPECT_TRUE(d == "[]" && (*p)->empty()) << "a list default other than [] is not checked here";
    } else {
      continue;
    }
    ++checked;
  }
  EXPECT_GT(checked, 30) << "the test compared too few keys to mean anything";
}

}  // namespace
}  // namespace packrat
