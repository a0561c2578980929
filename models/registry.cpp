#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <map>

#include "models/cifar_resnet.h"
#include "models/resnet.h"

namespace packrat {

namespace {

std::shared_ptr<Module> torchvision_resnet(const ModelSpec& s, bool bottleneck, std::array<int64_t, 4> blocks) {
  ResNetConfig c;
  c.bottleneck = bottleneck;
  c.blocks = blocks;
  c.stem = s.stem.empty() ? "imagenet" : s.stem;
  c.activation = s.activation;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  return std::make_shared<ResNet>(c);
}

std::shared_ptr<Module> cifar_resnet(const ModelSpec& s, int64_t depth) {
  PACKRAT_CHECK(s.stem.empty() || s.stem == "cifar",
                "model {}: the CIFAR ResNets have only the cifar stem (3x3 conv, no max-pool), got stem '{}'", s.arch,
                s.stem);
  CifarResNetConfig c;
  c.depth = depth;
  c.activation = s.activation;
  c.in_channels = s.in_channels;
  c.num_classes = s.num_classes;
  c.seed = s.seed;
  return std::make_shared<CifarResNet>(c);
}

using Factory = std::function<std::shared_ptr<Module>(const ModelSpec&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> m = {
      {"resnet18", [](const ModelSpec& s) { return torchvision_resnet(s, false, {2, 2, 2, 2}); }},
      {"resnet34", [](const ModelSpec& s) { return torchvision_resnet(s, false, {3, 4, 6, 3}); }},
      {"resnet50", [](const ModelSpec& s) { return torchvision_resnet(s, true, {3, 4, 6, 3}); }},
      {"resnet20", [](const ModelSpec& s) { return cifar_resnet(s, 20); }},
      {"resnet32", [](const ModelSpec& s) { return cifar_resnet(s, 32); }},
      {"resnet44", [](const ModelSpec& s) { return cifar_resnet(s, 44); }},
      {"resnet56", [](const ModelSpec& s) { return cifar_resnet(s, 56); }},
      {"resnet110", [](const ModelSpec& s) { return cifar_resnet(s, 110); }},
  };
  return m;
}

}  // namespace

std::vector<std::string> known_archs() {
  std::vector<std::string> names;
  for (const auto& [name, f] : factories()) names.push_back(name);
  return names;
}

std::shared_ptr<Module> make_model(const ModelSpec& spec) {
  auto it = factories().find(spec.arch);
  if (it == factories().end())
    fail("model: unknown architecture '{}' (known: {})", spec.arch, fmt::join(known_archs(), ", "));
  return it->second(spec);
}

}  // namespace packrat
