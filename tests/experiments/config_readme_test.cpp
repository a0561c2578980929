// README.md's table of config keys is generated from the descriptors (config_key.h): it lists
// exactly the keys the reader knows, with their defaults and ranges. After adding or changing a
// key, rewrite it with
//   PACKRAT_UPDATE_README=1 build/bin/packrat_tests --gtest_filter='ConfigKeysReadme.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "experiments/lib/config_key.h"

namespace packrat {
namespace {

constexpr const char* kBegin = "<!-- config keys: generated from experiments/lib/config_table.cpp; see tests/experiments/config_readme_test.cpp -->\n";
constexpr const char* kEnd = "<!-- end of config keys -->\n";

TEST(ConfigKeysReadme, TableListsExactlyTheDescriptorsKeysAndDefaults) {
  const std::string path = std::string(PACKRAT_SOURCE_DIR) + "/README.md";
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  std::string readme = ss.str();
  const size_t begin = readme.find(kBegin);
  size_t end = readme.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << path << " has no line: " << kBegin;
  ASSERT_NE(end, std::string::npos) << path << " has no line: " << kEnd;
  ASSERT_LT(begin, end);
  const size_t from = begin + std::string(kBegin).size();
  const std::string want = config_keys_markdown();
  if (std::getenv("PACKRAT_UPDATE_README") != nullptr) {
    readme.replace(from, end - from, want);
    std::ofstream(path) << readme;
    end = from + want.size();
  }
  EXPECT_EQ(readme.substr(from, end - from), want)
      << "README.md's config keys differ from the descriptors; rewrite them with PACKRAT_UPDATE_README=1 "
         "build/bin/packrat_tests --gtest_filter='ConfigKeysReadme.*'";
}

// Every key in the README is one the reader knows: spot checks of the table's rows.
TEST(ConfigKeysReadme, RowsCarryTheKeysDefaults) {
  const std::string md = config_keys_markdown();
  EXPECT_NE(md.find("| `data.batch_size` | `128` | 1 to 1048576 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `optimizer.lr` | sgd: `0.1`, adamw: `0.001` |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `schedule.gamma` | `0.1` | 0 to 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `data.dataset` | required |"), std::string::npos) << md;
  size_t rows = 0;
  for (size_t i = md.find("\n| `"); i != std::string::npos; i = md.find("\n| `", i + 1)) ++rows;
  EXPECT_EQ(rows, config_keys().size());
}

}  // namespace
}  // namespace packrat
