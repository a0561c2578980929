// Every input the fuzzers (fuzz/, scripts/fuzz.sh) found crashing is kept under
// tests/fuzz/crashers/<target>/ and replayed here through the same target body: each must now
// succeed or throw packrat::Error (run under scripts/sanitize.sh, also without a sanitizer report).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "fuzz/targets.h"
#include "tests/support/errors.h"

namespace fs = std::filesystem;
using namespace packrat;

namespace {

const fs::path kCrashers = fs::path(PACKRAT_SOURCE_DIR) / "tests" / "fuzz" / "crashers";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(FuzzRegression, EveryCrasherIsNowAnErrorOrSuccess) {
  const std::map<std::string, std::function<void(const uint8_t*, size_t)>> targets = {
      {"config", fuzz::config_target},           {"idx", fuzz::idx_target},
      {"cifar", fuzz::cifar_target},             {"image_folder", fuzz::image_folder_target},
      {"safetensors", fuzz::safetensors_target}, {"tar", fuzz::tar_target}};
  int replayed = 0;
  for (const auto& dir : fs::directory_iterator(kCrashers)) {
    const std::string target = dir.path().filename().string();
    ASSERT_TRUE(targets.count(target)) << "no fuzz target named " << target << " for " << dir.path();
    for (const auto& f : fs::directory_iterator(dir.path())) {
      const std::string bytes = read_file(f.path());
      EXPECT_NO_THROW(targets.at(target)(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) << f.path();
      ++replayed;
    }
  }
  EXPECT_GT(replayed, 0);
}

// Found by idx_fuzz: dimensions whose product overflows int64 (UBSan: signed overflow in read_idx).
TEST(FuzzRegression, IdxDimensionsThatOverflowAreACorruptFile) {
  const fs::path f = kCrashers / "idx" / "dims-overflow-int64";
  const std::string m = packrat::testing::message_of([&] { data::read_idx(f, 3, "fuzz"); });
  EXPECT_NE(m.find("fuzz: " + f.string() + " is corrupt: its dimensions promise more than 2^48 data bytes"),
            std::string::npos) << m;
}
