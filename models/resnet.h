#pragma once
// torchvision's ResNet-18/34 (BasicBlock) and ResNet-50 (Bottleneck): same parameter and
// buffer names (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc, ...) and torchvision's
// init (kaiming_normal fan_out for convs, BN weight 1 bias 0, fc as nn.Linear's default).
// Stem "imagenet": 7x7 stride-2 conv + 3x3 stride-2 max-pool; stem "cifar": 3x3 stride-1 conv,
// no max-pool (the usual adaptation for 32x32 inputs).
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/conv2d.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/pooling.h"
#include "layers/sequential.h"

namespace packrat {

struct ResNetConfig {
  bool bottleneck = false;                  // false: BasicBlock (18/34), true: Bottleneck (50)
  std::array<int64_t, 4> blocks{2, 2, 2, 2};  // blocks per stage
  std::string stem = "imagenet";            // imagenet | cifar
  std::string activation = "relu";
  int64_t in_channels = 3, num_classes = 1000;
  uint64_t seed = 0;
};

class ResNet : public Module {
 public:
  explicit ResNet(const ResNetConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, in_channels, H, W) -> (N, num_classes)

 private:
  std::shared_ptr<Sequential> make_stage(int64_t planes, int64_t blocks, int64_t stride, init::SeedSequence& seeds);

  ResNetConfig c_;
  int64_t inplanes_ = 64;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<Activation> act_;
  std::shared_ptr<MaxPool2d> maxpool_;  // imagenet stem only
  std::array<std::shared_ptr<Sequential>, 4> layers_;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace packrat
