#pragma once
// torchvision's EfficientNet-B0 and EfficientNetV2-S (torchvision/models/efficientnet.py, 0.14):
// the same module names and parameter shapes (features.0.0.weight, features.1.0.block.0.0.weight,
// features.2.0.block.3.fc1.weight, classifier.1.weight, ...), so a state dict saved here loads in
// torchvision with strict=True and back; torchvision's init, BN eps / momentum, SiLU, stochastic
// depth rising linearly from 0 over the blocks to stochastic_depth_prob, and classifier dropout.
//   features.0          stem ConvBnAct 3x3 (stride 2; stride 1 with stem "cifar", for 32x32 / 28x28)
//   features.1 .. S     one Sequential of (Fused)MBConv blocks per stage
//   features.S+1        1x1 ConvBnAct to last_channel
//   avgpool, flatten, classifier (0: Dropout, 1: Linear)
// width_mult / depth_mult scale every stage as torchvision's B-series does (channels by
// _make_divisible(c * width, 8), blocks by ceil(n * depth)); 1.0 reproduces the named model.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/linear.h"
#include "layers/module.h"
#include "layers/sequential.h"
#include "models/efficientnet_blocks.h"

namespace packrat {

// One row of torchvision's inverted_residual_setting (before the multipliers).
struct EfficientNetStage {
  bool fused;  // FusedMBConv (V2's first stages) or MBConv
  int64_t expand_ratio, kernel, stride, in, out, layers;
};

struct EfficientNetConfig {
  std::vector<EfficientNetStage> stages;
  int64_t last_channel = 0;  // 0: 4 x the last stage's (scaled) out, as the B-series
  double width_mult = 1.0, depth_mult = 1.0;
  BnSettings bn;
  float stochastic_depth_prob = 0.2f, dropout = 0.2f;
  std::string stem = "imagenet";  // imagenet (stride-2 stem) | cifar (stride-1 stem)
  std::string activation = "silu";
  int64_t in_channels = 3, num_classes = 1000;
  uint64_t seed = 0;
};

EfficientNetConfig efficientnet_b0_config();    // torchvision's efficientnet_b0
EfficientNetConfig efficientnet_v2_s_config();  // torchvision's efficientnet_v2_s

class EfficientNet : public Module {
 public:
  explicit EfficientNet(const EfficientNetConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, in_channels, H, W) -> (N, num_classes)
  const Sequential& features() const { return *features_; }

 private:
  std::shared_ptr<Sequential> features_, classifier_;
  std::shared_ptr<Module> avgpool_;
};

}  // namespace packrat
