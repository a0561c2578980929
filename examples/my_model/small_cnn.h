#pragma once
// A small CNN of your own, built from packrat's modules and named as PyTorch names the same
// nn.Module's attributes, so that its checkpoints carry `features.0.weight`, `classifier.weight`:
//
//   class SmallCnn(nn.Module):
//       def __init__(self, in_channels, classes, width=32):
//           super().__init__()
//           self.features = nn.Sequential(
//               nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
//               nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
//               nn.AdaptiveAvgPool2d(1), nn.Flatten())
//           self.classifier = nn.Linear(2 * width, classes)
//       def forward(self, x): return self.classifier(self.features(x))
#include <memory>
#include <string>

#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/conv2d.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/pooling.h"
#include "layers/sequential.h"
#include "models/registry.h"

namespace my_model {

class SmallCnn : public packrat::Module {
 public:
  SmallCnn(int64_t in_channels, int64_t classes, const std::string& activation, uint64_t seed, int64_t width = 32) {
    using namespace packrat;
    features_ = register_module("features", std::make_shared<Sequential>());
    features_->add(std::make_shared<Conv2d>(in_channels, width, 3, ConvConfig{.padding = 1}, seed + 1));  // features.0
    features_->add(std::make_shared<BatchNorm2d>(width));
    features_->add(std::make_shared<Activation>(activation));
    features_->add(std::make_shared<MaxPool2d>(2));
    features_->add(std::make_shared<Conv2d>(width, 2 * width, 3, ConvConfig{.padding = 1}, seed + 2));  // features.4
    features_->add(std::make_shared<BatchNorm2d>(2 * width));
    features_->add(std::make_shared<Activation>(activation));
    features_->add(std::make_shared<AdaptiveAvgPool2d>(1, 1));
    features_->add(std::make_shared<Flatten>());
    classifier_ = register_module("classifier", std::make_shared<Linear>(2 * width, classes, true, seed + 3));
  }
  packrat::Tensor forward(const packrat::Tensor& x) override { return (*classifier_)((*features_)(x)); }  // (N, C, H, W) -> (N, classes)

 private:
  std::shared_ptr<packrat::Sequential> features_;
  std::shared_ptr<packrat::Linear> classifier_;
};

// `model.arch: small_cnn`; reads model.activation, model.classes and model.in_channels.
inline packrat::ModelKind small_cnn_kind() {
  return {[](const packrat::ModelSpec& s) {
            return std::make_shared<SmallCnn>(s.in_channels, s.num_classes, s.activation.empty() ? "relu" : s.activation,
                                              s.seed);
          },
          {"activation", "classes", "in_channels"}};
}

}  // namespace my_model
