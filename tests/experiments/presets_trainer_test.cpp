// Every ActNN / GACT preset the README documents, chosen through the trainer's config with no
// registration call (the repro: `--set 'saved_tensors.default={scheme: L2}'` failed with
// "unknown scheme"): the memory report shows the storage the preset promises, and the levels
// packrat cannot reproduce (swapping, checkpointing) are errors that say so.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "experiments/lib/run.h"
#include "experiments/lib/tools.h"
#include "quant/policy/presets.h"
#include "tests/experiments/fixture.h"
#include "tests/support/errors.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& preset_data() {
  static const fs::path dir = make_idx_dataset("presets", 48, 16);
  return dir;
}

std::vector<std::string> with_preset(const std::string& name) {
  return {"saved_tensors.rules=[]", "saved_tensors.default={scheme: " + name + "}"};
}

// The scheme of the records of one op kind (checked to agree) and their bits per element,
// averaged over the elements (GACT's measured estimator has re-allocated them before the
// report's forward, so they differ per tensor).
struct Seen {
  std::string scheme;
  double bits = 0;
  int count = 0;
};
Seen records_of(const MemoryReport& r, const std::string& op, const std::string& expected_scheme) {
  Seen s;
  double elements = 0;
  for (const SavedRecord& rec : r.tensors) {
    // The activations, not batchnorm's per-channel statistics (kept exactly by every scheme).
    if (rec.op != op || rec.need != Need::Value || rec.numel <= 64) continue;
    // GACT keeps its most sensitive tensors in FP32 (its 32-bit candidate): those are "fp32".
    if (rec.scheme == "fp32" && rec.bits == 32 && expected_scheme == "gact") continue;
    if (s.count == 0) s.scheme = rec.scheme;
    EXPECT_EQ(rec.scheme, s.scheme) << op << " " << rec.layer;
    s.bits += rec.bits * static_cast<double>(rec.numel);
    elements += static_cast<double>(rec.numel);
    ++s.count;
  }
  if (elements > 0) s.bits /= elements;
  return s;
}

}  // namespace

TEST(Presets, EveryAvailablePresetWorksThroughTheTrainerConfig) {
  struct Expect {
    std::string name, conv_scheme;
    double conv_bits;
    std::string bn_scheme;
  };
  const std::vector<Expect> expected = {
      {"actnn-L0", "fp32", 32, "fp32"},     {"actnn-L1", "actnn", 4, "fp32"},  {"actnn-L2", "actnn", 4, "actnn"},
      {"actnn-L3", "gact", 2, "gact"},      {"gact-L0", "fp32", 32, "fp32"},   {"gact-L1", "gact", 4, "gact"},
      {"gact-adapt3", "gact", 3, "gact"},   {"gact-adapt2", "gact", 2, "gact"}, {"gact-fix4", "actnn", 4, "actnn"},
      {"gact-CB1", "gact", 4, "gact"},  // the stem's conv and batchnorm: the blocks keep only their inputs
      {"gact-CB2", "gact", 4, "gact"},  // on a ResNet (no attention) the same as gact-CB1
  };
  // Every available preset of the table is covered here, but those that offload (a GPU's:
  // emulated_gpu_trainer_test.cpp and the test below).
  size_t available = 0;
  for (const StoragePreset& p : storage_presets()) available += !p.scheme.empty() && !p.offload;
  EXPECT_EQ(available, expected.size());
  for (const Expect& e : expected) {
    SCOPED_TRACE(e.name);
    ASSERT_NE(find_storage_preset(e.name), nullptr);
    const fs::path out = temp_dir("preset_" + e.name);
    std::vector<std::string> sets = with_preset(e.name);
    // A key next to a preset overrides it: 2 tensors per measured refresh keeps the test fast.
    if (e.name == "gact-L1" || e.name == "gact-adapt3" || e.name == "gact-adapt2")
      sets[1] = "saved_tensors.default={scheme: " + e.name + ", tensors_per_refresh: 2}";
    const MemoryReport r = memory_report_only(tiny_config(preset_data(), out, sets));
    const Seen conv = records_of(r, "conv2d", e.conv_scheme), bn = records_of(r, "batchnorm2d", e.bn_scheme);
    ASSERT_GT(conv.count, 0);
    ASSERT_GT(bn.count, 0);
    EXPECT_EQ(conv.scheme, e.conv_scheme);
    // The adaptive tensors within the average budget. (gact-CB1's and CB2's budget covers every
    // tensor the step quantizes, most of them by the recompute in backward, after the report's snapshot.)
    if (e.conv_scheme == "gact" && !find_storage_preset(e.name)->recompute_blocks) {
      double bits = 0, elements = 0;
      for (const SavedRecord& rec : r.tensors)
        if (rec.scheme == "gact" && rec.need == Need::Value && !rec.shared) {
          bits += rec.bits * static_cast<double>(rec.numel);
          elements += static_cast<double>(rec.numel);
        }
      EXPECT_LE(bits / elements, e.conv_bits + 1e-9);
      EXPECT_GE(bits / elements, 1.0);
    } else if (e.conv_scheme != "gact") {
      EXPECT_EQ(conv.bits, e.conv_bits);
    }
    EXPECT_EQ(bn.scheme, e.bn_scheme);
    if (e.conv_scheme == "fp32") EXPECT_EQ(r.saved_bytes, r.saved_fp32_bytes);
    else if (e.bn_scheme == "fp32") EXPECT_LT(r.saved_bytes, r.saved_fp32_bytes * 3 / 4);
    else EXPECT_LT(r.saved_bytes, r.saved_fp32_bytes / 4);
  }
}

TEST(Presets, LevelsPackratCannotReproduceAreErrorsThatSaySo) {
  auto refusal = [](const std::string& name) {
    return message_of([&] { memory_report_only(tiny_config(preset_data(), temp_dir("preset_bad"), with_preset(name))); });
  };
  const std::string l5 = refusal("actnn-L5");
  EXPECT_NE(l5.find("saved_tensors.default"), std::string::npos) << l5;
  EXPECT_NE(l5.find("does none of that"), std::string::npos) << l5;
  EXPECT_NE(l5.find("'actnn-L3'"), std::string::npos) << l5;
  // The offloading levels need a second memory: on the CPU they are refused, naming the preset and
  // those with the same storage.
  for (const char* name : {"gact-L2", "actnn-L4"}) {
    const std::string m = refusal(name);
    EXPECT_NE(m.find("saved_tensors.default"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("(preset {}) moves saved tensors to host memory, but the device is the CPU", name)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("gact-L1, actnn-L3"), std::string::npos) << m;
  }
  // The old ambiguous names are gone; the error lists the presets.
  try {
    memory_report_only(tiny_config(preset_data(), temp_dir("preset_bad"), with_preset("L2")));
    FAIL() << "L2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gact-L1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gact-L2"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("actnn-L5"), std::string::npos) << e.what();  // not offered
  }
}

// Short training runs: ActNN L3 re-allocates its bits at every step from the analytic estimate,
// ActNN L1 trains with batchnorm kept in FP32 and the rest at 4 bits.
TEST(Presets, AdaptiveAndMixedPresetsTrain) {
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  for (const char* name : {"actnn-L3", "actnn-L1"}) {
    SCOPED_TRACE(name);
    const fs::path out = temp_dir(std::string("preset_run_") + name);
    std::vector<std::string> sets = with_preset(name);
    sets.push_back("train.epochs=1");
    sets.push_back("train.steps_per_epoch=3");
    const RunResult r = run_training(tiny_config(preset_data(), out, sets), quiet);
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_TRUE(std::isfinite(r.epochs[0].train_loss));
    if (std::string(name) == "actnn-L3") {
      // Refreshed after steps 0 and 1 had their backward (steps 1 and 2): two blocks of rows.
      std::ifstream csv(out / "gact_bits.csv");
      std::string line;
      std::set<std::string> steps;
      std::getline(csv, line);
      while (std::getline(csv, line)) steps.insert(line.substr(0, line.find(',')));
      EXPECT_EQ(steps, (std::set<std::string>{"1", "2"}));
    }
  }
}
