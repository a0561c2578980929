// Hostile inputs of issue 40, class 6: keys that were accepted and ignored, and errors that blamed
// the wrong key. Each must end in packrat::Error (exit 2) naming the key the user wrote, the file
// or flag, and what would be used instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/cli.h"
#include "experiments/lib/config.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/sweep_file.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

// A config of `arch` on `dataset`, with `model_extra` lines under model: (each "  key: value\n").
std::string yaml_of(const std::string& arch, const std::string& dataset, const std::string& model_extra = "") {
  return "data:\n  dataset: " + dataset + (dataset == "text" ? "\n  seq_len: 16\n" : "\n") + "model:\n  arch: " + arch +
         "\n" + model_extra;
}

std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return message_of([&] { parse_config(yaml, "k.yaml", sets); });
}

const fs::path& fixture_data() {
  static const fs::path dir = make_idx_dataset("idx_keys", 32, 16);
  return dir;
}

const std::vector<std::string> kOneShortEpoch = {"train.epochs=1", "train.steps_per_epoch=1"};

}  // namespace

// ViT took model.width_mult and ignored it, the GPT ignored stem, width_mult, patch_size and
// image_size, ResNet ignored patch_size: every model now refuses a key it does not read, whatever
// the value (width_mult: 1 is as ignored as 0.5), naming the key, its line, the model and its keys.
TEST(ConfigKeysHostile, ModelKeysTheModelDoesNotReadAreRefused) {
  std::string m = parse_error(yaml_of("vit_tiny_fmnist", "fashion_mnist", "  width_mult: 0.5\n"));
  EXPECT_TRUE(contains(m, "k.yaml: model.width_mult (line 5): vit_tiny_fmnist does not use this key")) << m;
  EXPECT_TRUE(contains(m, "image_size, patch_size")) << m;
  m = parse_error(yaml_of("vit_tiny_fmnist", "fashion_mnist", "  width_mult: 1.0\n"));
  EXPECT_TRUE(contains(m, "model.width_mult (line 5): vit_tiny_fmnist does not use this key")) << m;
  for (const char* line : {"  stem: cifar\n", "  width_mult: 2\n", "  patch_size: 4\n", "  image_size: 32\n",
                           "  in_channels: 1\n", "  stochastic_depth: 0.1\n"}) {
    m = parse_error(yaml_of("gpt_tiny", "text", line));
    EXPECT_TRUE(contains(m, "gpt_tiny does not use this key (it reads model.arch, activation, classes, dropout, attention)")) << m;
  }
  m = parse_error(yaml_of("resnet20", "fashion_mnist", "  patch_size: 4\n"));
  EXPECT_TRUE(contains(m, "model.patch_size (line 5): resnet20 does not use this key")) << m;
  m = parse_error(yaml_of("resnet18", "fashion_mnist"), {"model.dropout=0.1"});
  EXPECT_TRUE(contains(m, "--set model.dropout")) << m;
  EXPECT_TRUE(contains(m, "resnet18 does not use this key")) << m;
  // The keys each family reads are accepted.
  EXPECT_EQ(parse_error(yaml_of("vit_tiny_fmnist", "fashion_mnist", "  patch_size: 7\n  attention_dropout: 0.1\n")),
            "(no error)");
  EXPECT_EQ(parse_error(yaml_of("efficientnet_b0_small", "fashion_mnist", "  width_mult: 0.5\n  stem: cifar\n")),
            "(no error)");
  EXPECT_EQ(parse_error(yaml_of("gpt_tiny", "text", "  dropout: 0.1\n  classes: 256\n")), "(no error)");
  EXPECT_EQ(parse_error(yaml_of("resnet20", "fashion_mnist", "  stem: cifar\n  in_channels: 1\n")), "(no error)");
  // stem: "" chooses no stem: how a --set clears a base config's stem for a ViT (memory_table.sh).
  EXPECT_EQ(parse_error(yaml_of("vit_tiny_fmnist", "fashion_mnist", "  stem: cifar\n"), {"model.stem=\"\""}), "(no error)");
}

// The resolved config (config.yaml of a run, read again by --resume) holds only the keys its
// model and dataset read, so every family's reads back.
TEST(ConfigKeysHostile, ResolvedConfigsOfEveryFamilyReadBack) {
  for (const auto& [arch, dataset] : std::vector<std::pair<std::string, std::string>>{
           {"resnet20", "fashion_mnist"}, {"resnet18", "cifar100"}, {"vit_tiny_cifar", "cifar10"},
           {"gpt_tiny", "text"}, {"efficientnet_b0_small", "image_folder"}}) {
    const Config a = parse_config(yaml_of(arch, dataset), "k.yaml", {"schedule.name=step"});
    const std::string text = config_to_yaml(a);
    const Config b = parse_config(text, "resolved.yaml");
    EXPECT_EQ(config_to_yaml(b), text) << arch;
  }
}

// {scheme: gact-L1, bits: 2} was accepted while bits: 4 was refused (the check compared the value
// with the default): a written `bits` is refused whatever its value.
TEST(ConfigKeysHostile, GactRefusesBitsWhateverTheValue) {
  for (const char* scheme : {"gact-L1", "gact", "gact-adapt2"})
    for (const char* bits : {"2", "4"}) {
      const std::string m = parse_error(yaml_of("resnet20", "fashion_mnist") + "saved_tensors:\n  default: {scheme: " +
                                        scheme + ", bits: " + bits + "}\n");
      EXPECT_TRUE(contains(m, "saved_tensors.default (line 6)")) << scheme << " " << bits << ": " << m;
      EXPECT_TRUE(contains(m, "'bits' does not apply to gact")) << m;
    }
  EXPECT_EQ(parse_error(yaml_of("resnet20", "fashion_mnist") + "saved_tensors:\n  default: {scheme: gact-L1, avg_bits: 2}\n"),
            "(no error)");
}

// A rule whose layers: pattern matches no layer of the model (a typo) said nothing and left the
// tensors uncompressed: refused, naming the rule, the pattern, the model and some layer names.
TEST(ConfigKeysHostile, RuleLayersThatMatchNoLayerAreRefused) {
  Config c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules[0].layers=[\"layr2.*\"]"});
  std::string m = message_of([&] { make_session(c, synthetic_input_spec(c)); });
  EXPECT_TRUE(contains(m, "tiny.yaml: saved_tensors.rules[0] (line 13)")) << m;
  EXPECT_TRUE(contains(m, "layers pattern \"layr2.*\" matches no layer of resnet20")) << m;
  EXPECT_TRUE(contains(m, "its 73 layers: conv1, bn1, act, layer1, layer1.0, layer1.0.conv1")) << m;
  // One pattern of several that matches nothing is a typo too.
  c = tiny_config("/nonexistent", "/tmp/unused", {"saved_tensors.rules[0].layers=[\"layer2.*\", \"layer9.*\"]"});
  m = message_of([&] { make_session(c, synthetic_input_spec(c)); });
  EXPECT_TRUE(contains(m, "\"layer9.*\" matches no layer of resnet20")) << m;
  c = tiny_config("/nonexistent", "/tmp/unused");  // layers: ["layer2.*"]
  EXPECT_NO_THROW(make_session(c, synthetic_input_spec(c)));
}

// model.classes: 5 on a 10-class dataset failed deep in the cross-entropy: refused up front,
// in the synthetic modes and before a run trains.
TEST(ConfigKeysHostile, ClassesBelowTheDatasetsAreRefusedUpFront) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", {"model.classes=5"});
  std::string m = message_of([&] { synthetic_input_spec(c); });
  EXPECT_TRUE(contains(m, "tiny.yaml: model.classes is 5, but the mnist data has 10 classes (labels 0..9)")) << m;
  const fs::path out = temp_dir("keys_classes");
  m = message_of([&] { run_training(tiny_config(fixture_data(), out, {"model.classes=5"}), quiet()); });
  EXPECT_TRUE(contains(m, "model.classes is 5, but the mnist data has 10 classes")) << m;
  EXPECT_FALSE(fs::exists(out / "metrics.csv"));  // refused before the first epoch
  EXPECT_EQ(synthetic_input_spec(tiny_config("/nonexistent", "/tmp/unused", {"model.classes=12"})).classes, 12);
}

// Text data with a ResNet or a ViT failed in conv2d or blamed model.image_size: refused naming
// data.dataset, the model and the models that take text; a GPT on images names model.arch.
TEST(ConfigKeysHostile, TextDataAndImageModelsAreRefusedNamingBoth) {
  for (const char* arch : {"resnet20", "vit_tiny_cifar", "efficientnet_b0_small"}) {
    const std::string m = parse_error(yaml_of(arch, "text"));
    EXPECT_TRUE(contains(m, "k.yaml: data.dataset (line 2): is text (token sequences), but model.arch " +
                                std::string(arch) + " takes images")) << m;
    EXPECT_TRUE(contains(m, "gpt_medium, gpt_small, gpt_tiny")) << m;
    EXPECT_FALSE(contains(m, "image_size")) << m;
  }
  const std::string m = parse_error(yaml_of("gpt_tiny", "cifar10"));
  EXPECT_TRUE(contains(m, "k.yaml: model.arch (line 4): gpt_tiny takes text (data.dataset: text), but data.dataset is "
                          "cifar10")) << m;
}

// Keys of another kind of dataset (or schedule) were ignored: refused.
TEST(ConfigKeysHostile, DatasetAndScheduleKeysOfAnotherKindAreRefused) {
  const std::map<std::string, std::string> cases = {
      {"data.seq_len=64",
       "--set data.seq_len: data.seq_len: only applies to data.dataset text, text_classes, not fashion_mnist"},
      {"train.task=mlm", "--set train.task: train.task: only applies to data.dataset text, not fashion_mnist"},
      {"data.download=true", "only applies to data.dataset cifar10, cifar100, not fashion_mnist"},
      {"data.label=coarse", "--set data.label: data.label: only applies to data.dataset cifar100"},
      {"data.height=32", "only applies to data.dataset image_folder"},
      {"data.channels=3", "only applies to data.dataset image_folder"},
      {"schedule.gamma=0.5", "--set schedule.gamma: schedule.gamma: only applies to schedule.name: step or multistep"}};
  for (const auto& [set, want] : cases) {
    const std::string m = parse_error(yaml_of("resnet20", "fashion_mnist"), {set});
    EXPECT_TRUE(contains(m, want)) << set << ": " << m;
  }
  EXPECT_EQ(parse_error(yaml_of("resnet20", "cifar100"), {"data.label=coarse", "data.download=true"}), "(no error)");
  EXPECT_EQ(parse_error(yaml_of("resnet20", "fashion_mnist"), {"schedule.name=step", "schedule.gamma=0.5"}), "(no error)");
}

// Resuming an SGD run with an AdamW config named neither the checkpoint nor optimizer.name.
TEST(ConfigKeysHostile, ResumeWithAnotherOptimizerNamesTheCheckpointAndTheKey) {
  const fs::path out = temp_dir("keys_optimizer");
  run_training(tiny_config(fixture_data(), out, kOneShortEpoch), quiet());
  const auto ckpt = latest_checkpoint(out.string());
  ASSERT_TRUE(ckpt.has_value());
  RunOptions resume = quiet();
  resume.resume = true;
  std::vector<std::string> sets = kOneShortEpoch;
  sets.push_back("optimizer={name: adamw, lr: 0.001}");
  const std::string m = message_of([&] { run_training(tiny_config(fixture_data(), out, sets), resume); });
  EXPECT_TRUE(contains(m, *ckpt + ": optimizer state: entry 'momentum_buffer.")) << m;
  EXPECT_TRUE(contains(m, "is not state of optimizer.name adamw")) << m;
}

// --gradient-fidelity 1000000000 ran for minutes where a sweep file caps the draws at 10000;
// trainer --resume "" answered "--config FILE is required".
TEST(ConfigKeysHostile, TrainerFlagsNameTheFlag) {
  std::string m = message_of([] { parse_trainer_args({"--config", "c.yaml", "--gradient-fidelity", "1000000000"}); });
  EXPECT_TRUE(contains(m, "--gradient-fidelity: 1000000000 draws is more than the 10000 allowed")) << m;
  EXPECT_EQ(parse_trainer_args({"--config", "c.yaml", "--gradient-fidelity", "10000"}).gradient_fidelity, 10000);
  const fs::path dir = temp_dir("keys_sweep_cap");
  std::ofstream(dir / "b.yaml") << tiny_yaml("/nonexistent", dir / "out");
  m = message_of([&] { parse_sweep("name: s\nbase: b.yaml\npoints: [{name: a, sets: []}]\ngradient_fidelity: 10001\n", (dir / "s.yaml").string()); });
  EXPECT_TRUE(contains(m, "in [2, 10000], got 10001")) << m;
  m = message_of([] { parse_trainer_args({"--resume", ""}); });
  EXPECT_EQ(m, "--resume: needs a run directory, got an empty string");
}

// Test images of another size than the training images were refused without naming a file.
TEST(ConfigKeysHostile, TestImagesOfAnotherSizeNameTheFiles) {
  const fs::path small = make_idx_dataset("idx_keys_small", 16, 8, 10);
  const fs::path mixed = temp_dir("keys_mixed_sizes");
  fs::copy(fixture_data(), mixed, fs::copy_options::recursive);
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(small / f, mixed / f, fs::copy_options::overwrite_existing);
  const std::string m = message_of([&] {
    run_training(tiny_config(mixed, temp_dir("keys_mixed_out"), kOneShortEpoch), quiet());
  });
  EXPECT_TRUE(contains(m, "the test images (" + (mixed / "t10k-images-idx3-ubyte.gz").string() + ") are (1, 10, 10)"))
      << m;
  EXPECT_TRUE(contains(m, "the training images (" + (mixed / "train-images-idx3-ubyte.gz").string() + ") are (1, 12, 12)"))
      << m;
}

// Every shipped config, and every run of every shipped sweep at every scale, parses (no shipped file
// sets a key its model or dataset ignores), and every rule's layers: pattern matches a layer.
TEST(ConfigKeysHostile, ShippedConfigsAndSweepsParseAndBuild) {
  const fs::path root(PACKRAT_SOURCE_DIR);
  std::set<std::string> built;  // one session per model and set of layer patterns
  auto check = [&](const Config& c, const std::string& what) {
    if (c.data.dataset == "image_folder" && c.model.num_classes == 0) return;  // needs the folder for its classes
    std::string key = c.model.arch;
    for (const StoreRule& r : c.saved_tensors.rules)
      for (const std::string& l : r.layers) key += " " + l;
    if (key == c.model.arch || !built.insert(key).second) return;
    const std::string m = message_of([&] { make_session(c, synthetic_input_spec(c)); });
    EXPECT_EQ(m, "(no error)") << what;
  };
  int configs = 0, runs = 0;
  for (const auto& e : fs::directory_iterator(root / "configs"))
    if (e.path().extension() == ".yaml") {
      check(load_config(e.path().string()), e.path().string());
      ++configs;
    }
  for (const auto& e : fs::recursive_directory_iterator(root / "experiments")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!contains(text, "\nbase:") && text.rfind("base:", 0) != 0) {  // a base config, not a sweep
      check(load_config(e.path().string()), e.path().string());
      continue;
    }
    const SweepSpec s = load_sweep(e.path().string());
    std::vector<std::string> scales = {""};
    for (const auto& [name, sets] : s.scales) scales.push_back(name);
    for (const std::string& scale : scales)
      for (const SweepPoint& p : s.points()) {
        const std::string what = e.path().string() + " " + scale + " " + p.id;
        Config c;
        const std::string m = message_of([&] { c = load_config(s.base, s.run_sets(p, scale, 0, "/tmp/unused")); });
        ASSERT_EQ(m, "(no error)") << what;
        check(c, what);
        ++runs;
      }
  }
  EXPECT_GE(configs, 10);
  EXPECT_GT(runs, 10);
}

// Transforms written for text data were refused only when the loader opened the text, after the
// run directory was made: refused by the config, naming the key.
TEST(ConfigKeysHostile, TextDataTakesNoTransforms) {
  const std::string m = parse_error(yaml_of("gpt_tiny", "text"), {"data.train_transforms=[hflip]"});
  EXPECT_TRUE(contains(m, "--set data.train_transforms: data.train_transforms: only applies to data.dataset cifar10, "
                          "cifar100, fashion_mnist, mnist, image_folder, not text")) << m;
}

// A ViT on images of another side than model.image_size, or on non-square images, failed in the
// first forward blaming model.image_size (a key the user may never have set): refused up front,
// naming the key when it was set and the data when it was not.
TEST(ConfigKeysHostile, VitImageSizeMismatchNamesTheKeyOrTheData) {
  const std::vector<std::string> vit = {"model.arch=vit_tiny_fmnist", "saved_tensors.rules=[]"};
  std::vector<std::string> sets = vit;
  sets.push_back("model.image_size=28");
  Config c = tiny_config("/nonexistent", "/tmp/unused", sets);  // random_crop(12, 1): 12x12 inputs
  std::string m = message_of([&] { make_session(c, synthetic_input_spec(c)); });
  EXPECT_TRUE(contains(m, "tiny.yaml: model.image_size is 28, but the mnist training images are 12x12")) << m;
  c = tiny_config("/nonexistent", "/tmp/unused", vit);
  m = message_of([&] { make_session(c, InputSpec{1, 12, 16, 10}); });
  EXPECT_TRUE(contains(m, "tiny.yaml: vit_tiny_fmnist takes square images, but the mnist training images are 12x16")) << m;
  EXPECT_FALSE(contains(m, "model.image_size")) << m;
  EXPECT_NO_THROW(make_session(c, synthetic_input_spec(c)));
}

// A run's config.yaml written before the keys check listed every key for every model and dataset:
// --resume of such a run still reads it (the keys holding their defaults are dropped), while the
// same keys written by a user, or holding another value, are refused.
TEST(ConfigKeysHostile, ResumeReadsAnEarlierRunsResolvedConfig) {
  const fs::path dir = temp_dir("keys_earlier_run");
  const std::string earlier =
      "seed: 0\nthreads: 0\ndevice: cpu\nconv_algorithm: auto\n"
      "data:\n  dataset: fashion_mnist\n  root: \"\"\n  batch_size: 128\n  eval_batch_size: 256\n"
      "  train_transforms: [\"random_crop(28, 2)\"]\n  test_transforms: []\n  limit_train: 0\n  limit_test: 0\n"
      "  workers: 1\n  prefetch: 2\n  download: false\n  label: fine\n  height: 0\n  width: 0\n  channels: 3\n"
      "  seq_len: 0\n"
      "model:\n  arch: vit_tiny_fmnist\n  stem: \"\"\n  activation: \"gelu\"\n  classes: 0\n  in_channels: 0\n"
      "  image_size: 0\n  patch_size: 0\n  width_mult: 1\n  depth_mult: 1\n"
      "saved_tensors:\n  default: {scheme: fp32}\n  rules:\n    []\n"
      "optimizer:\n  name: sgd\n  lr: 0.1\n  momentum: 0.9\n  nesterov: false\n  weight_decay: 0\n"
      "schedule:\n  name: cosine\n  warmup_epochs: 0\n  min_lr: 0\n  gamma: 0.1\n"
      "train:\n  epochs: 1\n  label_smoothing: 0\n  clip_grad_norm: 0\n  eval_interval: 1\n  steps_per_epoch: 0\n"
      "  log_interval: 50\n"
      "output:\n  dir: \"" + dir.string() + "\"\n  checkpoint_interval: 1\n";
  std::ofstream(dir / "config.yaml") << earlier;
  const std::string path = (dir / "config.yaml").string();
  EXPECT_TRUE(contains(message_of([&] { load_config(path); }), "data.download (line 16): only applies to data.dataset"));
  const Config c = load_run_config(path);
  EXPECT_EQ(c.model.arch, "vit_tiny_fmnist");
  EXPECT_DOUBLE_EQ(c.schedule.gamma, 0.1);
  EXPECT_EQ(c.data.train_transforms.size(), 1u);
  EXPECT_TRUE(contains(message_of([&] { load_run_config(path, {"model.width_mult=0.5"}); }),
                       "model.width_mult: vit_tiny_fmnist does not use this key"));
  std::string edited = earlier;
  edited.replace(edited.find("width_mult: 1"), 13, "width_mult: 2");
  std::ofstream(dir / "config.yaml") << edited;
  EXPECT_TRUE(contains(message_of([&] { load_run_config(path); }), "model.width_mult (line 30): vit_tiny_fmnist"));
}
