#pragma once
// Models by name, for configs and the trainer.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"
#include "models/sequential_spec.h"

namespace packrat {

// A model by name and options. It is also the config's model section (experiments/lib/config.h:
// Config::model, one key per field but seed), where in_channels and num_classes 0 mean "the
// data's" until make_session fills them in.
struct ModelSpec {
  // resnet18 | resnet34 | resnet50 | resnet20 | resnet32 | resnet44 | resnet56 | resnet110 |
  // vit_b_16 | vit_tiny_cifar | vit_tiny_fmnist | gpt_tiny | gpt_small | gpt_medium (models/gpt.h;
  // num_classes = the vocabulary) | bert_tiny | bert_small | bert_base | bert_large (models/bert.h) | efficientnet_b0 | efficientnet_v2_s | efficientnet_b0_small |
  // efficientnet_v2_small | sequential (the model of `layers`, models/sequential_model.h); see known_archs()
  std::string arch;
  // imagenet | cifar; "" picks the architecture's own: imagenet for resnet18/34/50, cifar for the
  // CIFAR ResNets (which have only the cifar stem: asking them for imagenet is an error).
  std::string stem;
  // any name from autograd/pointwise.h; "": default_activation(arch) (ResNet relu, EfficientNet silu,
  // ViT and GPT gelu)
  std::string activation;
  int64_t in_channels = 3, num_classes = 10;
  uint64_t seed = 0;
  // Vision Transformers (vit_*): input side and patch size; 0 takes the preset's.
  int64_t image_size = 0, patch_size = 0;
  // EfficientNet only: multipliers applied on top of the preset's own (torchvision's
  // _make_divisible(c * width, 8) channels, ceil(n * depth) blocks per stage).
  double width_mult = 1.0, depth_mult = 1.0;
  // Regularisation; < 0 keeps the preset's own. dropout: ViT (after the embeddings and in the
  // MLPs), GPT (embeddings, attention probabilities, residual branches), EfficientNet (before the
  // classifier); attention_dropout: ViT's attention probabilities; stochastic_depth: EfficientNet's
  // drop-path probability of the last block (rising linearly from 0 over the blocks).
  double dropout = -1, attention_dropout = -1, stochastic_depth = -1;
  // Text encoders (ModelKind::encodes_text) only: which head the session builds: "classes" (a
  // pooled first-token classifier, logits (N, num_classes): data.dataset text_classes) or "tokens"
  // (the tied masked-language-model head, logits (N, T, num_classes = the vocabulary):
  // data.dataset text with train.task mlm). "" lets the model pick "classes".
  std::string text_head;
  // Transformers (ViT, GPT, BERT): the attention algorithm, "" (auto: memory_efficient on the CPU
  // from 512 keys on, standard otherwise; layers/multihead_attention.h) | standard | memory_efficient.
  std::string attention;
  // BERT only: pre-LN layers (and a final LayerNorm) instead of BERT's post-LN.
  bool norm_first = false;
  // sequential only (model.layers): the layers, in order, built as an nn.Sequential
  // (models/sequential_spec.h: "conv2d(32, 3, padding=1)", ..., residual: [...]).
  std::vector<LayerSpec> layers;
};

// How a model is built from a spec, and what of the config it reads.
struct ModelKind {
  std::function<std::shared_ptr<Module>(const ModelSpec&)> make;
  // The config's model.* keys it reads besides `arch` ("stem", "activation", "classes",
  // "in_channels", "image_size", "patch_size", "width_mult", "depth_mult", "dropout",
  // "attention_dropout", "stochastic_depth", "layers"): the config refuses any other key set for it,
  // and make_model a spec that sets dropout, attention_dropout, stochastic_depth or layers without
  // reading it. A kind that reads "layers" requires them (the config reads them with line numbers).
  std::vector<std::string> keys = {"classes", "in_channels"};
  bool takes_text = false;                 // token sequences (data.dataset: text), not images
  std::string default_activation = "relu"; // what model.activation "" means for it
  // A bidirectional encoder (bert_*): it classifies token sequences (data.dataset: text_classes)
  // or predicts masked tokens (data.dataset: text, train.task: mlm), as ModelSpec::text_head says;
  // takes_text is true as well. The GPTs (takes_text only) predict the next token.
  bool encodes_text = false;
};

// Registers a model under `name` (an existing name is replaced), for configs (`model.arch: name`)
// and every tool that builds models; the built-in models are registered the same way. A program
// of your own registers its models before it hands over to the trainer
// (experiments/lib/trainer_main.h; examples/my_model/).
void register_model(const std::string& name, ModelKind kind);

// Throws packrat::Error listing the known architectures when spec.arch is unknown.
std::shared_ptr<Module> make_model(const ModelSpec& spec);
std::vector<std::string> known_archs();  // sorted
bool is_known_arch(const std::string& arch);
// The activation an architecture is defined with (ResNets relu, EfficientNets silu, ViTs and GPTs
// gelu). These three read an unknown architecture as a ResNet (the config refuses it elsewhere).
std::string default_activation(const std::string& arch);
// The config's model.* keys an architecture reads besides `arch` (ModelKind::keys).
const std::vector<std::string>& model_keys(const std::string& arch);
// Whether the architecture takes token sequences (the GPTs, on data.dataset: text) rather than images.
bool takes_text(const std::string& arch);
// Whether it is a text encoder (ModelKind::encodes_text).
bool encodes_text(const std::string& arch);

}  // namespace packrat
