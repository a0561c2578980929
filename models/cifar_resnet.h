#pragma once
// The CIFAR ResNets of He et al. 2016, section 4.2: depth 6n+2 (20, 32, 44, 56, 110):
// a 3x3 conv to 16 channels, three stages of n BasicBlocks at 16/32/64 channels (the first
// block of stages 2 and 3 has stride 2), global average pooling and a linear classifier.
// Shortcuts are option A (parameter-free: subsample + zero-pad channels, layers/shortcut_a.h),
// so ResNet-20 has 269,722 parameters for 10 classes. Convs: kaiming_normal fan_in (He init);
// fc: nn.Linear's default.
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

struct CifarResNetConfig {
  int64_t depth = 20;  // 6n + 2
  std::string activation = "relu";
  int64_t in_channels = 3, num_classes = 10;
  uint64_t seed = 0;
};

class CifarResNet : public Module {
 public:
  explicit CifarResNet(const CifarResNetConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, in_channels, H, W) -> (N, num_classes)

 private:
  std::shared_ptr<Sequential> make_stage(int64_t planes, int64_t blocks, int64_t stride, init::SeedSequence& seeds);

  CifarResNetConfig c_;
  int64_t inplanes_ = 16;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<Activation> act_;
  std::array<std::shared_ptr<Sequential>, 3> layers_;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace packrat
