#pragma once
// Models by name, for configs and the trainer.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

struct ModelSpec {
  std::string arch;                 // see known_archs(): resnet18/34/50, resnet20/32/44/56/110, efficientnet_*
  // imagenet | cifar; "" picks the architecture's own: imagenet for resnet18/34/50, cifar for the
  // CIFAR ResNets (which have only the cifar stem: asking them for imagenet is an error).
  std::string stem;
  std::string activation;           // any name from autograd/pointwise.h; "": default_activation(arch)
  int64_t in_channels = 3, num_classes = 10;
  uint64_t seed = 0;
  // EfficientNet only: multipliers applied on top of the preset's own (torchvision's
  // _make_divisible(c * width, 8) channels, ceil(n * depth) blocks per stage).
  double width_mult = 1.0, depth_mult = 1.0;
};

// Throws packrat::Error listing the known architectures when spec.arch is unknown.
std::shared_ptr<Module> make_model(const ModelSpec& spec);
std::vector<std::string> known_archs();
bool is_known_arch(const std::string& arch);
// The activation an architecture is defined with: silu for EfficientNets, relu otherwise.
std::string default_activation(const std::string& arch);

}  // namespace packrat
