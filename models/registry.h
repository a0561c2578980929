#pragma once
// Models by name, for configs and the trainer.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

struct ModelSpec {
  std::string arch;                 // resnet18 | resnet34 | resnet50 | resnet20 | resnet32 | resnet44 | resnet56 | resnet110
  // imagenet | cifar; "" picks the architecture's own: imagenet for resnet18/34/50, cifar for the
  // CIFAR ResNets (which have only the cifar stem: asking them for imagenet is an error).
  std::string stem;
  std::string activation = "relu";  // any name from autograd/pointwise.h
  int64_t in_channels = 3, num_classes = 10;
  uint64_t seed = 0;
};

// Throws packrat::Error listing the known architectures when spec.arch is unknown.
std::shared_ptr<Module> make_model(const ModelSpec& spec);
std::vector<std::string> known_archs();

}  // namespace packrat
