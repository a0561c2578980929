#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/named_registry.h"

#include "models/bert.h"
#include "models/cifar_resnet.h"
#include "models/efficientnet.h"
#include "models/gpt.h"
#include "models/resnet.h"
#include "models/sequential_model.h"
#include "models/vit.h"

namespace packrat {

namespace {

// The multipliers scale EfficientNets and BERTs only: anything else must leave them at 1.
void check_no_multipliers(const ModelSpec& s) {
  PACKRAT_CHECK(s.width_mult == 1.0 && s.depth_mult == 1.0,
                "model {}: width_mult ({}) and depth_mult ({}) apply to the EfficientNets and BERTs only", s.arch, s.width_mult,
                s.depth_mult);
}

std::shared_ptr<Module> torchvision_resnet(const ModelSpec& s, bool bottleneck, std::array<int64_t, 4> blocks) {
  check_no_multipliers(s);
  ResNetConfig c;
  c.bottleneck = bottleneck;
  c.blocks = blocks;
  c.stem = s.stem.empty() ? "imagenet" : s.stem;
  c.activation = s.activation.empty() ? default_activation(s.arch) : s.activation;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  return std::make_shared<ResNet>(c);
}

std::shared_ptr<Module> cifar_resnet(const ModelSpec& s, int64_t depth) {
  check_no_multipliers(s);
  PACKRAT_CHECK(s.stem.empty() || s.stem == "cifar",
                "model {}: the CIFAR ResNets have only the cifar stem (3x3 conv, no max-pool), got stem '{}'", s.arch,
                s.stem);
  CifarResNetConfig c;
  c.depth = depth;
  c.activation = s.activation.empty() ? default_activation(s.arch) : s.activation;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  return std::make_shared<CifarResNet>(c);
}

// A ViT preset, with the spec's image size, patch size, activation, channels, classes and seed.
std::shared_ptr<Module> vit(const ModelSpec& s, VitConfig c) {
  PACKRAT_CHECK(s.stem.empty(), "model {}: a Vision Transformer has no stem option, got stem '{}'", s.arch, s.stem);
  if (s.image_size > 0) c.image_size = s.image_size;
  if (s.patch_size > 0) c.patch_size = s.patch_size;
  PACKRAT_CHECK(c.image_size % c.patch_size == 0, "model {}: model.image_size {} is not divisible by model.patch_size {}",
                s.arch, c.image_size, c.patch_size);
  if (!s.activation.empty()) c.activation = s.activation;
  if (s.dropout >= 0) c.dropout = static_cast<float>(s.dropout);
  if (s.attention_dropout >= 0) c.attention_dropout = static_cast<float>(s.attention_dropout);
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  c.attention = s.attention;
  return std::make_shared<VisionTransformer>(c);
}

// torchvision's vit_b_16, and small ones with patch 4 for 32x32 and 28x28 inputs.
VitConfig vit_b_16_config() { return VitConfig{224, 16, 12, 12, 768, 3072}; }
VitConfig vit_tiny_cifar_config() { return VitConfig{32, 4, 6, 3, 192, 384}; }
VitConfig vit_tiny_fmnist_config() { return VitConfig{28, 4, 4, 4, 64, 128}; }

// A GPT preset over the data's vocabulary (num_classes: 256 for bytes).
std::shared_ptr<Module> gpt(const ModelSpec& s) {
  GptConfig c = gpt_preset(s.arch);
  if (!s.activation.empty()) c.activation = s.activation;  // the MLP's
  if (s.dropout >= 0) c.dropout = static_cast<float>(s.dropout);
  c.vocab = s.num_classes;
  c.seed = s.seed;
  c.attention = s.attention;
  return std::make_shared<Gpt>(c);
}

// A BERT preset at the spec's width and depth multipliers: the heads scale (each keeps the preset's
// width per head, 64), so width_mult 0.125 on bert_large is 2 heads of 64 (hidden 128), and the
// layers `ceil(n * depth_mult)`. BERT-large's 24 layers at an eighth of its width is what makes the
// activations, not the parameters, the memory of a step on a 2-core CPU (experiments/frontier).
BertConfig scaled(BertConfig c, const ModelSpec& s) {
  const double heads = static_cast<double>(c.heads) * s.width_mult;
  PACKRAT_CHECK(heads >= 1 && heads == std::floor(heads),
                "model {}: model.width_mult {} gives {} attention heads; it must give a whole number of at least 1 (the "
                "preset has {})",
                s.arch, s.width_mult, heads, c.heads);
  const int64_t per_head = c.hidden / c.heads;
  c.heads = static_cast<int64_t>(heads);
  c.hidden = c.heads * per_head;
  c.intermediate = 4 * c.hidden;
  c.layers = static_cast<int64_t>(std::ceil(static_cast<double>(c.layers) * s.depth_mult - 1e-9));
  return c;
}

// A BERT preset over bytes (vocabulary 256), with the classes head (num_classes) or the
// masked-language-model head (num_classes = the vocabulary), as spec.text_head says.
std::shared_ptr<Module> bert(const ModelSpec& s) {
  PACKRAT_CHECK(s.stem.empty(), "model {}: a BERT has no stem option, got stem '{}'", s.arch, s.stem);
  BertConfig c = scaled(bert_preset(s.arch), s);
  if (!s.activation.empty()) c.activation = s.activation;
  if (s.dropout >= 0) c.dropout = static_cast<float>(s.dropout);
  if (s.attention_dropout >= 0) c.attention_dropout = static_cast<float>(s.attention_dropout);
  c.head = s.text_head.empty() ? "classes" : s.text_head;
  if (c.head == "tokens") c.vocab = s.num_classes;
  else c.num_classes = s.num_classes;
  c.norm_first = s.norm_first;
  c.attention = s.attention;
  c.seed = s.seed;
  return std::make_shared<Bert>(c);
}

// An EfficientNet preset: torchvision's configuration `base`, the preset's own multipliers and
// stem, then the spec's multipliers and stem on top.
std::shared_ptr<Module> efficientnet(const ModelSpec& s, EfficientNetConfig c, double width, double depth,
                                     const std::string& own_stem) {
  PACKRAT_CHECK(s.width_mult > 0 && s.depth_mult > 0, "model {}: width_mult {} and depth_mult {} must be positive",
                s.arch, s.width_mult, s.depth_mult);
  c.width_mult = width * s.width_mult;
  c.depth_mult = depth * s.depth_mult;
  c.stem = s.stem.empty() ? own_stem : s.stem;
  c.activation = s.activation.empty() ? default_activation(s.arch) : s.activation;
  if (s.dropout >= 0) c.dropout = static_cast<float>(s.dropout);
  if (s.stochastic_depth >= 0) c.stochastic_depth_prob = static_cast<float>(s.stochastic_depth);
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  return std::make_shared<EfficientNet>(c);
}

const std::vector<std::string> kResNetKeys = {"stem", "activation", "classes", "in_channels"};
const std::vector<std::string> kVitKeys = {"activation", "classes",           "in_channels", "image_size",
                                           "patch_size", "dropout",           "attention_dropout", "attention"};
// classes is the vocabulary; the tokens need no channels, image size or stem.
const std::vector<std::string> kGptKeys = {"activation", "classes", "dropout", "attention"};
// classes: the data's classes (text_classes) or the vocabulary (masked-language-model pretraining).
const std::vector<std::string> kBertKeys = {"activation", "classes",    "dropout",   "attention_dropout",
                                            "attention",  "norm_first", "width_mult", "depth_mult"};
const std::vector<std::string> kEfficientNetKeys = {"stem",       "activation", "classes", "in_channels",
                                                    "width_mult", "depth_mult", "dropout", "stochastic_depth"};

// The model of model.layers: no stem, activation or multipliers of its own (the list says it all);
// image_size makes make_session check the images are square (the shapes chain from one side).
const std::vector<std::string> kSequentialKeys = {"classes", "in_channels", "image_size", "layers"};

ModelKind resnet_kind(std::function<std::shared_ptr<Module>(const ModelSpec&)> make) {
  return {std::move(make), kResNetKeys, false, "relu"};
}
ModelKind vit_kind(VitConfig (*config)()) {
  return {[config](const ModelSpec& s) { return vit(s, config()); }, kVitKeys, false, "gelu"};
}
ModelKind gpt_kind() { return {gpt, kGptKeys, true, "gelu"}; }
ModelKind bert_kind() {
  ModelKind k{bert, kBertKeys, true, "gelu"};
  k.encodes_text = true;
  return k;
}
ModelKind efficientnet_kind(EfficientNetConfig (*config)(), double width, double depth, const char* stem) {
  return {[=](const ModelSpec& s) { return efficientnet(s, config(), width, depth, stem); }, kEfficientNetKeys, false,
          "silu"};
}

NamedRegistry<ModelKind>& models() {
  static NamedRegistry<ModelKind> r({
      {"resnet18", resnet_kind([](const ModelSpec& s) { return torchvision_resnet(s, false, {2, 2, 2, 2}); })},
      {"resnet34", resnet_kind([](const ModelSpec& s) { return torchvision_resnet(s, false, {3, 4, 6, 3}); })},
      {"resnet50", resnet_kind([](const ModelSpec& s) { return torchvision_resnet(s, true, {3, 4, 6, 3}); })},
      {"resnet20", resnet_kind([](const ModelSpec& s) { return cifar_resnet(s, 20); })},
      {"resnet32", resnet_kind([](const ModelSpec& s) { return cifar_resnet(s, 32); })},
      {"resnet44", resnet_kind([](const ModelSpec& s) { return cifar_resnet(s, 44); })},
      {"resnet56", resnet_kind([](const ModelSpec& s) { return cifar_resnet(s, 56); })},
      {"resnet110", resnet_kind([](const ModelSpec& s) { return cifar_resnet(s, 110); })},
      {"vit_b_16", vit_kind(vit_b_16_config)},
      {"vit_tiny_cifar", vit_kind(vit_tiny_cifar_config)},
      {"vit_tiny_fmnist", vit_kind(vit_tiny_fmnist_config)},
      {"gpt_tiny", gpt_kind()},
      {"gpt_small", gpt_kind()},
      {"gpt_medium", gpt_kind()},
      {"bert_tiny", bert_kind()},
      {"bert_small", bert_kind()},
      {"bert_base", bert_kind()},
      {"bert_large", bert_kind()},
      // torchvision's models, and small presets for 32x32 / 28x28 inputs that train on 2 cores:
      // half the width, a half (B0: 9 blocks) or a quarter (V2: 12 blocks) of the depth, cifar stem.
      {"efficientnet_b0", efficientnet_kind(efficientnet_b0_config, 1, 1, "imagenet")},
      {"efficientnet_v2_s", efficientnet_kind(efficientnet_v2_s_config, 1, 1, "imagenet")},
      {"efficientnet_b0_small", efficientnet_kind(efficientnet_b0_config, 0.5, 0.5, "cifar")},
      {"efficientnet_v2_small", efficientnet_kind(efficientnet_v2_s_config, 0.5, 0.25, "cifar")},
      // The model the config describes layer by layer (model.layers): PyTorch's nn.Sequential.
      {"sequential", ModelKind{make_sequential_model, kSequentialKeys, false, "relu"}},
  });
  return r;
}

// The kind of a known architecture; throws listing the known ones otherwise.
const ModelKind& kind_of(const std::string& arch) {
  const ModelKind* k = models().find(arch);
  if (!k) fail("model.arch: unknown architecture '{}' (known: {})", arch, fmt::join(known_archs(), ", "));
  return *k;
}

bool reads(const ModelKind& k, const char* key) { return std::find(k.keys.begin(), k.keys.end(), key) != k.keys.end(); }

// A spec that sets `key` (model.<key>) for an architecture that does not read it is an error
// naming the architectures that do.
void check_reads(const ModelSpec& spec, const ModelKind& k, const char* key, bool set, const char* what) {
  if (!set || reads(k, key)) return;
  std::vector<std::string> with;
  for (const std::string& a : known_archs())
    if (reads(*models().find(a), key)) with.push_back(a);
  fail("model.{}: {} has no {} (architectures with one: {})", key, spec.arch, what, fmt::join(with, ", "));
}

}  // namespace

void register_model(const std::string& name, ModelKind kind) {
  PACKRAT_CHECK(!name.empty(), "register_model: the name is empty");
  PACKRAT_CHECK(static_cast<bool>(kind.make), "register_model: model '{}' has no factory", name);
  models().add(name, std::move(kind));
}

std::vector<std::string> known_archs() {
  std::vector<std::string> names = models().names();
  std::sort(names.begin(), names.end());
  return names;
}

bool is_known_arch(const std::string& arch) { return models().find(arch) != nullptr; }

// An unknown architecture reads as a ResNet here: the config names it as unknown where it checks
// model.arch, after its other keys.
std::string default_activation(const std::string& arch) {
  const ModelKind* k = models().find(arch);
  return k ? k->default_activation : "relu";
}

const std::vector<std::string>& model_keys(const std::string& arch) {
  const ModelKind* k = models().find(arch);
  return k ? k->keys : kResNetKeys;
}

bool takes_text(const std::string& arch) {
  const ModelKind* k = models().find(arch);
  return k && k->takes_text;
}

bool encodes_text(const std::string& arch) {
  const ModelKind* k = models().find(arch);
  return k && k->encodes_text;
}

std::shared_ptr<Module> make_model(const ModelSpec& spec) {
  const ModelKind& k = kind_of(spec.arch);
  check_reads(spec, k, "dropout", spec.dropout >= 0, "dropout");
  check_reads(spec, k, "attention_dropout", spec.attention_dropout >= 0, "separate attention dropout");
  check_reads(spec, k, "stochastic_depth", spec.stochastic_depth >= 0, "stochastic depth");
  check_reads(spec, k, "layers", !spec.layers.empty(), "list of layers");
  std::shared_ptr<Module> m = k.make(spec);
  PACKRAT_CHECK(m != nullptr, "model {}: its factory returned no model", spec.arch);
  return m;
}

}  // namespace packrat
