// The "your own model" path, followed as a user would: examples/my_model is a program that
// registers two models (register_model) and runs the trainer. Trained on the tiny config, each
// gets the trainer's run directory: metrics, a memory report under its own layer names, and
// checkpoints whose tensors carry the PyTorch attribute names; the Transformer's block, which
// says it is one, is recomputed under memory.recompute: [blocks]. Registering models in this
// process: the registry lists them, refuses an empty name, and a name registered again is
// replaced.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "examples/my_model/small_cnn.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/json.h"
#include "experiments/lib/safetensors.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

fs::path example_binary() { return fs::read_symlink("/proc/self/exe").parent_path() / "my_model"; }

// Trains `arch` for the tiny config's 2 epochs with build/bin/my_model in dir; returns the run directory.
fs::path train(const fs::path& dir, const fs::path& data, const std::string& arch, const std::string& extra = "") {
  const fs::path bin = example_binary();
  EXPECT_TRUE(fs::exists(bin)) << bin << " is not built (CMakeLists.txt builds examples/*/ with the tests)";
  std::ofstream(dir / "tiny.yaml") << tiny_yaml(data, dir / "run");
  const std::string cmd = bin.string() + " --config " + (dir / "tiny.yaml").string() +
                          " --set 'saved_tensors.rules=[]' --set model.arch=" + arch + " " + extra + " > " +
                          (dir / "out.txt").string() + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "out.txt");
  return dir / "run";
}

}  // namespace

TEST(MyModelExample, ACnnOfYourOwnTrainsWithTheTrainersRunDirectoryAndPyTorchNames) {
  const fs::path data = make_idx_dataset("my_model", 64, 16);
  const fs::path run = train(temp_dir("my_model_cnn"), data, "small_cnn");
  EXPECT_NE(read_text(run / "metrics.csv").find("test_acc"), std::string::npos);
  const SafetensorsFile ckpt = read_safetensors(latest_checkpoint(run.string()).value());
  for (const char* name : {"model.features.0.weight", "model.features.1.running_mean", "model.features.4.weight",
                           "model.classifier.weight", "model.classifier.bias"})
    EXPECT_NE(ckpt.find(name), nullptr) << name;
  const Json report = parse_json(read_text(run / "memory_report.json"));
  bool conv_saved = false;
  for (const Json& t : report["tensors"]) conv_saved = conv_saved || (t["layer"] == "features.4" && t["op"] == "conv2d");
  EXPECT_TRUE(conv_saved) << report.dump();
}

TEST(MyModelExample, ATransformerBlockOfYourOwnIsRecomputedAsABlock) {
  const fs::path data = make_idx_dataset("my_model_tf", 64, 16);
  const fs::path run = train(temp_dir("my_model_tf"), data, "tiny_transformer",
                             "--set 'memory.recompute=[blocks]' --set 'saved_tensors.default={scheme: actnn, bits: 4}'");
  const Json report = parse_json(read_text(run / "memory_report.json"));
  ASSERT_TRUE(report.contains("recompute")) << report.dump();
  EXPECT_EQ(report["recompute"]["segments"], Json::parse("[\"block\"]"));
  EXPECT_GT(report["recompute"]["inputs_bytes_by_scheme"]["actnn"].get<int64_t>(), 0);
  const SafetensorsFile ckpt = read_safetensors(latest_checkpoint(run.string()).value());
  for (const char* name : {"model.patch_embed.weight", "model.block.attn.in_proj_weight", "model.block.mlp.0.weight",
                           "model.head.weight"})
    EXPECT_NE(ckpt.find(name), nullptr) << name;
}

TEST(MyModelExample, RegisteredModelsAreListedReplacedAndChecked) {
  register_model("test_small_cnn", my_model::small_cnn_kind());
  EXPECT_TRUE(is_known_arch("test_small_cnn"));
  EXPECT_EQ(model_keys("test_small_cnn"), (std::vector<std::string>{"activation", "classes", "in_channels"}));
  ModelSpec s;
  s.arch = "test_small_cnn";
  s.in_channels = 1;
  s.num_classes = 10;
  EXPECT_EQ(make_model(s)->named_parameters().front().first, "features.0.weight");
  s.dropout = 0.1;  // not a key it reads
  EXPECT_NE(message_of([&] { make_model(s); }).find("model.dropout: test_small_cnn has no dropout"), std::string::npos);
  ModelKind wider = my_model::small_cnn_kind();
  wider.make = [](const ModelSpec& m) { return std::make_shared<my_model::SmallCnn>(m.in_channels, m.num_classes, "relu", 0, 8); };
  register_model("test_small_cnn", wider);  // replaced
  s.dropout = -1;
  EXPECT_EQ(make_model(s)->named_parameters().front().second.dim(0), 8);
  EXPECT_NE(message_of([] { register_model("", my_model::small_cnn_kind()); }).find("the name is empty"),
            std::string::npos);
}
