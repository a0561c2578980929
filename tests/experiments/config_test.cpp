#include <gtest/gtest.h>

#include "core/error.h"
#include "experiments/lib/config.h"
#include "tests/experiments/run_files.h"

using namespace packrat;
using packrat::testing::contains;

namespace {

const char* kMinimal = R"(seed: 7
threads: 2
data:
  dataset: fashion_mnist
  batch_size: 64
model:
  arch: resnet20
)";

// The message of the packrat::Error that parsing throws ("" when it does not throw).
std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "test.yaml", sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, ParsesSectionsAndFillsDefaults) {
  Config c = parse_config(kMinimal, "test.yaml");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.data.dataset, "fashion_mnist");
  EXPECT_EQ(c.data.batch_size, 64);
  EXPECT_EQ(c.model.arch, "resnet20");
  EXPECT_EQ(c.model.activation, "relu");  // the architecture's own
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_EQ(c.saved_tensors.default_scheme.scheme, "fp32");
  EXPECT_EQ(c.train.epochs, 1);
}

TEST(Config, UnknownKeyNamesKeyAndLine) {
  const std::string msg = error_of(std::string(kMinimal) + "train:\n  epochs: 2\n  epoch: 3\n");
  EXPECT_TRUE(contains(msg, "train.epoch")) << msg;
  EXPECT_TRUE(contains(msg, "line 10")) << msg;
  EXPECT_TRUE(contains(msg, "unknown key")) << msg;
  EXPECT_TRUE(contains(msg, "test.yaml")) << msg;
}

TEST(Config, UnknownTopLevelSection) {
  const std::string msg = error_of(std::string(kMinimal) + "optimiser:\n  lr: 0.1\n");
  EXPECT_TRUE(contains(msg, "optimiser")) << msg;
  EXPECT_TRUE(contains(msg, "line 8")) << msg;
}

TEST(Config, WrongTypeNamesKeyAndLine) {
  const std::string msg = error_of("data:\n  dataset: cifar10\n  batch_size: lots\nmodel:\n  arch: resnet18\n");
  EXPECT_TRUE(contains(msg, "data.batch_size (line 3)")) << msg;
  EXPECT_TRUE(contains(msg, "'lots'")) << msg;
  const std::string msg2 = error_of(std::string(kMinimal) + "optimizer:\n  nesterov: maybe\n");
  EXPECT_TRUE(contains(msg2, "optimizer.nesterov (line 9)")) << msg2;
}

TEST(Config, OutOfRangeNamesKeyAndLine) {
  const std::string msg = error_of(std::string(kMinimal) + "train:\n  label_smoothing: 1.5\n");
  EXPECT_TRUE(contains(msg, "train.label_smoothing (line 9)")) << msg;
  EXPECT_TRUE(contains(msg, "[0, 0.999]")) << msg;
  EXPECT_TRUE(contains(error_of("data:\n  dataset: x\n  batch_size: 0\nmodel: {arch: r}\n"), "data.batch_size (line 3)"));
}

TEST(Config, BadChoicesAndMissingKeys) {
  EXPECT_TRUE(contains(error_of(std::string(kMinimal) + "optimizer: {name: rmsprop}\n"), "sgd, adamw"));
  const std::string dev = error_of(std::string(kMinimal) + "device: gpu\n");
  EXPECT_TRUE(contains(dev, "device (line 8)")) << dev;
  EXPECT_TRUE(contains(dev, "cpu, cuda or cuda:N")) << dev;
  EXPECT_TRUE(contains(error_of("model: {arch: resnet20}\n"), "data"));
  EXPECT_TRUE(contains(error_of("data: {dataset: cifar10}\nmodel: {stem: cifar}\n"), "model.arch"));
  EXPECT_TRUE(contains(error_of(std::string(kMinimal) + "schedule: {name: multistep}\n"), "milestones"));
  EXPECT_TRUE(contains(error_of(std::string(kMinimal) + "schedule: {name: cosine, step_size: 3}\n"), "schedule.step_size (line 8)"));
  EXPECT_TRUE(contains(error_of(""), "empty"));
  EXPECT_TRUE(contains(error_of("data: [1, 2\n"), "YAML syntax error at line"));
  const std::string act = error_of("data: {dataset: x}\nmodel: {arch: r, activation: swish2}\n");
  EXPECT_TRUE(contains(act, "model.activation (line 2)")) << act;
  const std::string conv = error_of(std::string(kMinimal) + "conv_algorithm: fastest\n");
  EXPECT_TRUE(contains(conv, "auto, direct, deterministic")) << conv;
  EXPECT_EQ(parse_config(kMinimal, "test.yaml", {"conv_algorithm=deterministic"}).conv_algorithm, "deterministic");
}

TEST(Config, SetOverridesAnyKey) {
  Config c = parse_config(kMinimal, "test.yaml",
                          {"data.batch_size=256", "optimizer.lr=0.05", "train.epochs=3", "model.activation=gelu",
                           "data.train_transforms=[hflip, \"random_crop(28, 2)\"]"});
  EXPECT_EQ(c.data.batch_size, 256);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.model.activation, "gelu");
  ASSERT_EQ(c.data.train_transforms.size(), 2u);
  EXPECT_EQ(c.data.train_transforms[1], "random_crop(28, 2)");
}

TEST(Config, SetErrorsNameTheOverride) {
  const std::string msg = error_of(kMinimal, {"data.batch_size=-4"});
  EXPECT_TRUE(contains(msg, "--set data.batch_size")) << msg;
  const std::string typo = error_of(kMinimal, {"data.batchsize=4"});
  EXPECT_TRUE(contains(typo, "unknown key 'batchsize'")) << typo;
  EXPECT_TRUE(contains(typo, "--set data.batchsize")) << typo;
  EXPECT_TRUE(contains(error_of(kMinimal, {"data.batch_size"}), "key=value"));
  EXPECT_TRUE(contains(error_of(kMinimal, {"saved_tensors.rules[2].bits=3"}), "no item"));
}

TEST(Config, SavedTensorsRulesKeepOptionsAndWhere) {
  const std::string yaml = std::string(kMinimal) +
                           "saved_tensors:\n"
                           "  default: fp32\n"
                           "  rules:\n"
                           "    - ops: [gelu, conv2d]\n"
                           "      layers: [\"layer1.*\"]\n"
                           "      scheme: fp32\n";
  Config c = parse_config(yaml, "test.yaml");
  ASSERT_EQ(c.saved_tensors.rules.size(), 1u);
  const StoreRule& r = c.saved_tensors.rules[0];
  EXPECT_EQ(r.ops, (std::vector<std::string>{"gelu", "conv2d"}));
  EXPECT_EQ(r.layers, (std::vector<std::string>{"layer1.*"}));
  EXPECT_EQ(r.spec.where, "saved_tensors.rules[0] (line 11)");
  // Options no scheme asks for are reported with the rule's line.
  const std::string msg = error_of(yaml + "      bogus: 3\n");
  EXPECT_TRUE(contains(msg, "saved_tensors.rules[0] (line 11)")) << msg;
  EXPECT_TRUE(contains(msg, "bogus")) << msg;
  const std::string unknown = error_of(std::string(kMinimal) + "saved_tensors:\n  default: {scheme: zip}\n");
  EXPECT_TRUE(contains(unknown, "unknown scheme 'zip'")) << unknown;
  EXPECT_TRUE(contains(unknown, "fp32")) << unknown;
  EXPECT_TRUE(contains(error_of(std::string(kMinimal) + "saved_tensors:\n  rules:\n    - {scheme: fp32}\n"), "ops"));
  const std::string op = error_of(std::string(kMinimal) + "saved_tensors:\n  rules:\n    - {ops: [conv], scheme: fp32}\n");
  EXPECT_TRUE(contains(op, "saved_tensors.rules[0].ops (line 10)")) << op;
  EXPECT_TRUE(contains(op, "unknown op 'conv'")) << op;
}

TEST(Config, ResolvedYamlRoundTrips) {
  const std::string yaml = std::string(kMinimal) +
                           "saved_tensors:\n  rules:\n    - {ops: [gelu], layers: [\"layer*\"], scheme: fp32}\n"
                           "optimizer: {name: adamw, lr: 0.001, weight_decay: 0.05}\n"
                           "schedule: {name: multistep, milestones: [1, 3], warmup_epochs: 0.5}\n";
  Config a = parse_config(yaml, "a.yaml", {"data.train_transforms=[\"random_crop(32, 4)\", hflip]", "seed=123"});
  const std::string text = config_to_yaml(a);
  Config b = parse_config(text, "resolved.yaml");
  EXPECT_EQ(config_to_yaml(b), text);
  EXPECT_EQ(b.seed, 123u);
  EXPECT_EQ(b.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(b.optimizer.lr, 0.001);
  EXPECT_EQ(b.schedule.milestones, (std::vector<int64_t>{1, 3}));
  EXPECT_DOUBLE_EQ(b.schedule.warmup_epochs, 0.5);
  EXPECT_EQ(b.data.train_transforms, a.data.train_transforms);
  ASSERT_EQ(b.saved_tensors.rules.size(), 1u);
  EXPECT_EQ(b.saved_tensors.rules[0].layers[0], "layer*");
}

TEST(Config, ShippedConfigsParse) {
  for (const char* name : {"quickstart.yaml", "resnet18_gelu_3bit.yaml"}) {
    const Config c = load_config(std::string(PACKRAT_SOURCE_DIR) + "/configs/" + name);
    EXPECT_FALSE(c.model.arch.empty()) << name;
  }
  const Config q = load_config(std::string(PACKRAT_SOURCE_DIR) + "/configs/quickstart.yaml");
  EXPECT_EQ(q.data.dataset, "fashion_mnist");
  EXPECT_EQ(q.model.arch, "resnet20");
  const Config r = load_config(std::string(PACKRAT_SOURCE_DIR) + "/configs/resnet18_gelu_3bit.yaml");
  EXPECT_EQ(r.model.activation, "gelu");
  EXPECT_EQ(r.saved_tensors.default_scheme.scheme, "actnn");
  ASSERT_EQ(r.saved_tensors.rules.size(), 1u);
  EXPECT_EQ(r.saved_tensors.rules[0].spec.scheme, "fewbit");
  EXPECT_EQ(r.saved_tensors.rules[0].spec.options.at("bits"), "3");
}

TEST(Config, SetOnARuleOptionIsNamedInSchemeErrors) {
  const std::string yaml = std::string(kMinimal) + "saved_tensors:\n  rules:\n    - {ops: [gelu], scheme: fewbit, bits: 3}\n";
  const Config ok = parse_config(yaml, "test.yaml", {"saved_tensors.rules[0].bits=2"});
  EXPECT_EQ(ok.saved_tensors.rules[0].spec.options.at("bits"), "2");
  const std::string msg = error_of(yaml, {"saved_tensors.rules.0.bits=9"});
  EXPECT_TRUE(contains(msg, "saved_tensors.rules[0] (line 10) (--set saved_tensors.rules[0].bits)")) << msg;
  EXPECT_TRUE(contains(msg, "'bits' is 9")) << msg;
}

// YAML keeps one of two equal keys without a word (yaml-cpp the first): a repeated key or a
// second section is an error naming both lines.
TEST(Config, DuplicateKeysAndSectionsNameBothLines) {
  std::string msg = error_of(std::string(kMinimal) + "train:\n  epochs: 2\n  epochs: 3\n");
  EXPECT_TRUE(contains(msg, "test.yaml: train.epochs (line 10): duplicate key 'epochs', first given on line 9")) << msg;
  msg = error_of(std::string(kMinimal) + "data:\n  dataset: mnist\n");
  EXPECT_TRUE(contains(msg, "test.yaml: data (line 8): duplicate key 'data', first given on line 3")) << msg;
  msg = error_of(std::string(kMinimal) + "saved_tensors:\n  rules:\n    - {ops: [relu], scheme: fewbit, bits: 1, bits: 2}\n");
  EXPECT_TRUE(contains(msg, "saved_tensors.rules[0].bits (line 10): duplicate key 'bits'")) << msg;
}

// "batch_size:" with nothing after it is not the default but a mistake.
TEST(Config, KeysWithNoValueAreErrors) {
  std::string msg = error_of(std::string(kMinimal) + "train:\n  epochs:\n");
  EXPECT_TRUE(contains(msg, "test.yaml: train.epochs (line 9): has no value")) << msg;
  msg = error_of(std::string(kMinimal) + "optimizer:\n");
  EXPECT_TRUE(contains(msg, "optimizer (line 8): has no value")) << msg;
  msg = error_of(std::string(kMinimal) + "schedule: {name: ~}\n");
  EXPECT_TRUE(contains(msg, "schedule.name (line 8): has no value")) << msg;
  msg = error_of(kMinimal, {"data.batch_size=null"});
  EXPECT_TRUE(contains(msg, "--set data.batch_size: data.batch_size: has no value")) << msg;
}

TEST(Config, MalformedSetArgumentsAreErrors) {
  std::string msg = error_of(kMinimal, {"data.batch_size="});
  EXPECT_TRUE(contains(msg, "--set data.batch_size=: no value after '='")) << msg;
  msg = error_of(kMinimal, {"data.batch_size.=5"});
  EXPECT_TRUE(contains(msg, "--set data.batch_size.=5: empty key component")) << msg;
  msg = error_of(kMinimal, {"train.=5"});
  EXPECT_TRUE(contains(msg, "empty key component")) << msg;
  // A key a --set made up is blamed on the --set, not on a line of the file.
  msg = error_of(kMinimal, {"data.nope.x=1"});
  EXPECT_TRUE(contains(msg, "--set data.nope.x: data.nope: unknown key 'nope'")) << msg;
  EXPECT_FALSE(contains(msg, "line")) << msg;
}

// Transform items are checked with the config: the message names the key and its line.
TEST(Config, BadTransformsNameTheKey) {
  std::string msg = error_of("data:\n  dataset: mnist\n  train_transforms: [\"resize(1e10)\"]\nmodel: {arch: resnet20}\n");
  EXPECT_TRUE(contains(msg, "test.yaml: data.train_transforms (line 3)")) << msg;
  EXPECT_TRUE(contains(msg, "larger than 65536")) << msg;
  msg = error_of(kMinimal, {"data.test_transforms=[bogus]"});
  EXPECT_TRUE(contains(msg, "--set data.test_transforms: data.test_transforms: transform 'bogus'")) << msg;
}
