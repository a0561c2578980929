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

// Replays every file under root/<target>/ through that fuzz target; returns how many.
int replay_all(const fs::path& root) {
  const std::map<std::string, std::function<void(const uint8_t*, size_t)>> targets = {
      {"config", fuzz::config_target},           {"idx", fuzz::idx_target},
      {"cifar", fuzz::cifar_target},             {"image_folder", fuzz::image_folder_target},
      {"safetensors", fuzz::safetensors_target}, {"tar", fuzz::tar_target}};
  int replayed = 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    const std::string target = dir.path().filename().string();
    EXPECT_TRUE(targets.count(target)) << "no fuzz target named " << target << " for " << dir.path();
    if (!targets.count(target)) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      const std::string bytes = read_file(f.path());
      EXPECT_NO_THROW(targets.at(target)(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) << f.path();
      ++replayed;
    }
  }
  return replayed;
}

}  // namespace

TEST(FuzzRegression, EveryCrasherIsNowAnErrorOrSuccess) { EXPECT_GT(replay_all(kCrashers), 0); }

// Fixed and replayed from tests/fuzz/crashers/ by the test above: config/set-index-out-of-range-stoll
// (an index past int64 in a --set path threw std::out_of_range, exit 1) and
// image_folder/png-null-failure-reason.png (stb_image failed without a reason; formatting the null
// pointer threw fmt::format_error, exit 1).
// Still open, kept under tests/fuzz/open/: image_folder/*.bmp, see
// ImagesWhoseHeaderPromisesMoreThanTheFileHoldsAreRefused below.
// Enable with the fixes and move the inputs to tests/fuzz/crashers/.
TEST(FuzzRegression, DISABLED_OpenFindingsAreNowAnErrorOrSuccess) {
  EXPECT_GT(replay_all(fs::path(PACKRAT_SOURCE_DIR) / "tests" / "fuzz" / "open"), 0);
}

// Found by idx_fuzz: dimensions whose product overflows int64 (UBSan: signed overflow in read_idx).
TEST(FuzzRegression, IdxDimensionsThatOverflowAreACorruptFile) {
  const fs::path f = kCrashers / "idx" / "dims-overflow-int64";
  const std::string m = packrat::testing::message_of([&] { data::read_idx(f, 3, "fuzz"); });
  EXPECT_NE(m.find("fuzz: " + f.string() + " is corrupt: its dimensions promise more than 2^48 data bytes"),
            std::string::npos) << m;
}

// Found by image_folder_fuzz (timeout), NOT FIXED: data/image_folder.cpp's decode_image hands any
// file to stb_image, whose BMP reader believes the header: a 77-byte BMP that claims 4 x 16449541
// pixels decodes (the missing pixels read as 0) into a 200 MB image, then a 800 MB float copy for
// the resize; under the sanitizers it takes over 20 s. The fix belongs to image_folder.cpp (another
// piece of work): stbi_info_from_memory first, refuse dimensions past a limit and pixel data the
// file cannot hold, naming the file. Enable this test with the fix and move the inputs from
// tests/fuzz/open/ to tests/fuzz/crashers/.
TEST(FuzzRegression, DISABLED_ImagesWhoseHeaderPromisesMoreThanTheFileHoldsAreRefused) {
  int checked = 0;
  for (const auto& f : fs::directory_iterator(fs::path(PACKRAT_SOURCE_DIR) / "tests" / "fuzz" / "open" / "image_folder")) {
    data::ImageShape shape;
    const std::string m = packrat::testing::message_of([&] { data::decode_image(f.path(), 3, 0, 0, shape); });
    EXPECT_NE(m.find("image_folder: " + f.path().string()), std::string::npos) << m;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}
