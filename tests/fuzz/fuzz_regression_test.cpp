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
// and image_folder/bmp-*.bmp (see ImagesWhoseHeaderPromisesMoreThanTheFileHoldsAreRefused below),
// image_folder/empty-bmp-height-0.bmp (see AnImageThatDecodesEmptyIsRefused below),
// image_folder/header-negative-side-overflow.bmp (a header's negative height made pixels * channels
// overflow in the header check: UBSan; refused now as a corrupt header),
// and image_folder/stb-huffman-symbol-out-of-range-*.jpg: stb_image's JPEG Huffman decoder
// computed a symbol id from a crafted table without checking its range (upstream checks it since
// 2.28; Debian 12's is older): an assert abort where NDEBUG is unset, an out-of-range read in
// Release builds (ASan: heap-use-after-free). JPEG files now go to libjpeg-turbo (data/jpeg_decode.h).
// A new finding goes under tests/fuzz/open/<target>/ with this test disabled, and moves to
// tests/fuzz/crashers/ with its fix.
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

// Found by image_folder_fuzz (timeout): stb_image's BMP reader believed the header, so a 77-byte
// BMP that claims 4 x 16449541 pixels decoded (the missing pixels read as 0) into a 200 MB image,
// then an 800 MB float copy for the resize. decode_image now reads the header first and refuses
// pixel data the file cannot hold, naming the file.
TEST(FuzzRegression, ImagesWhoseHeaderPromisesMoreThanTheFileHoldsAreRefused) {
  int checked = 0;
  for (const auto& f : fs::directory_iterator(kCrashers / "image_folder")) {
    if (f.path().filename().string().rfind("bmp-", 0) != 0) continue;  // the header-promise findings
    data::ImageShape shape;
    const std::string m = packrat::testing::message_of([&] { data::decode_image(f.path(), 3, 0, 0, shape); });
    EXPECT_NE(m.find("image_folder: " + f.path().string() + " is corrupt: its header promises"), std::string::npos) << m;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// Found by image_folder_fuzz: stb_image decodes a BMP of height 0 to an empty image, and the resize
// to data.height x data.width then read before its buffer (a crash in Release builds too).
TEST(FuzzRegression, AnImageThatDecodesEmptyIsRefused) {
  const fs::path f = kCrashers / "image_folder" / "empty-bmp-height-0.bmp";
  data::ImageShape shape;
  const std::string m = packrat::testing::message_of([&] { data::decode_image(f, 3, 8, 8, shape); });
  // The header check names it now; decode_image also refuses an empty decode the header did not show.
  EXPECT_NE(m.find("image_folder: " + f.string() + " is corrupt or too large: its header promises 4x0 pixels"),
            std::string::npos)
      << m;
}
