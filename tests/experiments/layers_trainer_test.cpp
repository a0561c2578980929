// configs/layers_fmnist.yaml, a model described in the config (model.arch: sequential), trained by
// the trainer on Fashion-MNIST (Debian's dataset-fashion-mnist) for a few steps: its checkpoint holds
// exactly the state_dict names of the same nn.Sequential (tests/golden/make_layers_golden.py
// --check loads one there with strict=True), its config.yaml the layers. The trainer binary exits
// 2 with one line naming the layer on a malformed layer or shapes that do not chain.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "experiments/lib/checkpoint.h"
#include "experiments/lib/config.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const std::string kConfig = std::string(PACKRAT_SOURCE_DIR) + "/configs/layers_fmnist.yaml";

bool have_fashion_mnist() { return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

fs::path trainer_binary() { return fs::read_symlink("/proc/self/exe").parent_path() / "trainer"; }

}  // namespace

TEST(LayersTrainer, TrainsOnFashionMnistWithNnSequentialNames) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path out = temp_dir("layers_fmnist");
  const Config c =
      load_config(kConfig, {"train.epochs=1", "train.steps_per_epoch=4", "data.batch_size=32", "data.limit_test=64",
                            "data.eval_batch_size=64", "output.dir=" + out.string()});
  const RunResult r = run_training(c, quiet());
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(r.epochs[0].train_loss));
  EXPECT_TRUE(std::isfinite(r.epochs[0].test_acc));

  // nn.Sequential's state_dict: conv 0, bn 1, residual 4 (body: conv 0, bn 1, conv 3, bn 4), conv 6, bn 7, linear 12.
  std::set<std::string> want;
  auto conv = [&](const std::string& p) {
    for (const char* n : {"weight", "bias"}) want.insert("model." + p + "." + n);
  };
  auto bn = [&](const std::string& p) {
    for (const char* n : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
      want.insert("model." + p + "." + n);
  };
  conv("0"), bn("1"), conv("4.body.0"), bn("4.body.1"), conv("4.body.3"), bn("4.body.4"), conv("6"), bn("7");
  conv("12");
  const SafetensorsFile ckpt = read_safetensors(checkpoint_path(out.string(), 1));
  std::set<std::string> got;
  for (const auto& [name, t] : ckpt.tensors)
    if (name.rfind("model.", 0) == 0) got.insert(name);
  EXPECT_EQ(got, want);
  EXPECT_EQ(ckpt.find("model.0.weight")->shape(), (Shape{32, 1, 3, 3}));
  EXPECT_EQ(ckpt.find("model.12.weight")->shape(), (Shape{10, 64}));

  // The run's resolved config holds the layers and reads back to the same ones (--resume).
  const Config back = load_run_config((out / "config.yaml").string());
  EXPECT_EQ(back.model.layers, c.model.layers);
  EXPECT_EQ(config_to_yaml(back), read_text(out / "config.yaml"));
}

TEST(LayersTrainer, BadLayersExitTwoNamingTheLayer) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = temp_dir("layers_bad");
  for (const auto& [set, says] : std::vector<std::pair<std::string, std::string>>{
           {"model.layers[4].residual[2]=rellu",
            "--set model.layers[4].residual[2]: model.layers[4].residual[2]: rellu: unknown layer 'rellu' (known: "},
           {"model.layers[10]=relu",  // no flatten before the classifier
            "layers_fmnist.yaml: model.layers[12] (line 34): linear(10) takes 2-d input (N, features), gets "
            "(N, 64, 1, 1): add flatten before it"},
       }) {
    const fs::path log = dir / "out.txt";
    const std::string cmd = trainer_binary().string() + " --config " + kConfig +
                            " --set 'output.dir=" + (dir / "run").string() + "' --set '" + set + "' > " + log.string() +
                            " 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 2) << read_text(log);
    const std::string text = read_text(log);
    const size_t at = text.find("trainer: error: ");
    ASSERT_NE(at, std::string::npos) << text;
    const std::string error = text.substr(at);  // after the log's lines (the precision)
    EXPECT_TRUE(contains(error, says)) << text;
    EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << text;  // one line, the last
  }
}
