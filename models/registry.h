#pragma once
// Models by name, for configs and the trainer.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

struct ModelSpec {
  // resnet18 | resnet34 | resnet50 | resnet20 | resnet32 | resnet44 | resnet56 | resnet110 |
  // vit_b_16 | vit_tiny_cifar | vit_tiny_fmnist | gpt_tiny | gpt_small | gpt_medium (models/gpt.h;
  // num_classes = the vocabulary)
  std::string arch;
  // imagenet | cifar; "" picks the architecture's own: imagenet for resnet18/34/50, cifar for the
  // CIFAR ResNets (which have only the cifar stem: asking them for imagenet is an error).
  std::string stem;
  // any name from autograd/pointwise.h; "" picks the architecture's own (ResNet: relu, ViT and GPT: gelu)
  std::string activation;
  int64_t in_channels = 3, num_classes = 10;
  uint64_t seed = 0;
  // Vision Transformers (vit_*): input side and patch size; 0 takes the preset's.
  int64_t image_size = 0, patch_size = 0;
};

// Throws packrat::Error listing the known architectures when spec.arch is unknown.
std::shared_ptr<Module> make_model(const ModelSpec& spec);
std::vector<std::string> known_archs();

}  // namespace packrat
