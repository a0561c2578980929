// The README's "your own scheme" path, followed as a user would: examples/my_scheme is a
// program that registers a "bf16" store and then runs the trainer (experiments/lib/trainer_main.h).
// Run on a tiny config with --memory-report-only, its memory report must name the new scheme
// and count 2 bytes per element held, half the FP32 bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "experiments/lib/json.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

// build/bin/my_scheme beside this test binary.
fs::path example_binary(const std::string& name) {
  return fs::read_symlink("/proc/self/exe").parent_path() / name;
}

}  // namespace

TEST(MySchemeExample, RegistersItsSchemeAndTrainsWithIt) {
  const fs::path bin = example_binary("my_scheme");
  ASSERT_TRUE(fs::exists(bin)) << bin << " is not built (CMakeLists.txt builds examples/*/ with the tests)";
  const fs::path dir = temp_dir("my_scheme");
  {
    std::ofstream cfg(dir / "tiny.yaml");
    cfg << tiny_yaml(dir / "no_data_needed", dir / "run");
  }
  const std::string cmd = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.default={scheme: bf16}' --set 'saved_tensors.rules=[]'" +
                          " --memory-report-only > " + (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "out.txt");
  const Json report = parse_json(read_text(dir / "run" / "memory_report.json"), "memory_report.json");
  int64_t bf16_tensors = 0, bf16_bytes = 0, bf16_fp32 = 0;
  for (const Json& t : report.at("tensors")) {
    if (t.at("scheme").get<std::string>() != "bf16") continue;
    if (t.at("op").get<std::string>() == "relu") continue;  // ReLU's derivative: a 1-bit mask, not bf16
    ++bf16_tensors;
    const int64_t bytes = json_integer(t.at("bytes")), fp32 = json_integer(t.at("fp32_bytes"));
    EXPECT_EQ(t.at("bits").get<double>(), 16.0);
    if (fp32 == 0) continue;  // a buffer saved by two ops counts once
    // 2 bytes per element, plus at most the allocator's rounding of one block.
    EXPECT_GE(bytes, fp32 / 2) << t.at("layer").get<std::string>();
    EXPECT_LT(bytes, fp32 / 2 + 256) << t.at("layer").get<std::string>();
    bf16_bytes += bytes;
    bf16_fp32 += fp32;
  }
  EXPECT_GT(bf16_tensors, 20);  // every conv, batchnorm and linear input of ResNet-20
  EXPECT_NEAR(static_cast<double>(bf16_bytes) / static_cast<double>(bf16_fp32), 0.5, 0.01);
  // An option the scheme does not read is an error naming it, exit code 2.
  const std::string bad = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.default={scheme: bf16, bits: 3}' --memory-report-only > " +
                          (dir / "bad.txt").string() + " 2>&1";
  const int status = std::system(bad.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(read_text(dir / "bad.txt").find("unknown key 'bits'"), std::string::npos) << read_text(dir / "bad.txt");
}
