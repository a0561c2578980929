#pragma once
// The building blocks of torchvision's EfficientNet (torchvision/models/efficientnet.py,
// torchvision/ops/misc.py), with torchvision's child names so state dicts match:
//   ConvBnAct    = Conv2dNormActivation: Sequential(0: conv (no bias), 1: BatchNorm2d[, 2: act])
//   SqueezeExcitation: avgpool, fc1, fc2 (1x1 convs with bias), activation (SiLU), scale_activation
//                      (sigmoid); out = sigmoid(fc2(act(fc1(avgpool(x))))) * x, the (N, C, 1, 1)
//                      scale broadcast over (N, C, H, W)
//   MBConv       = block: Sequential([expand 1x1 ConvBnAct,] depthwise ConvBnAct, SE, project 1x1
//                  ConvBn), stochastic_depth; residual when stride 1 and in == out
//   FusedMBConv  = block: Sequential(expand kxk ConvBnAct, project 1x1 ConvBn) or, with expand
//                  ratio 1, one kxk ConvBnAct; stochastic_depth; residual as MBConv
// Convs are drawn kaiming_normal fan_out with zero biases, torchvision's EfficientNet init.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/conv2d.h"
#include "layers/init.h"
#include "layers/module.h"
#include "layers/sequential.h"
#include "layers/stochastic_depth.h"

namespace packrat {

// BatchNorm2d settings of one model (B0: eps 1e-5; V2: eps 1e-3; momentum 0.1 for both).
struct BnSettings {
  float eps = 1e-5f, momentum = 0.1f;
};

// A Conv2d (kernel k, padding (k - 1) / 2) drawn kaiming_normal fan_out, zero bias when it has one.
std::shared_ptr<Conv2d> make_efficientnet_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                               bool bias, uint64_t seed);

// Conv2dNormActivation; activation "" leaves out the activation (child 2).
std::shared_ptr<Sequential> make_conv_bn_act(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                             const BnSettings& bn, const std::string& activation, uint64_t seed);

class SqueezeExcitation : public Module {
 public:
  SqueezeExcitation(int64_t channels, int64_t squeeze_channels, const std::string& activation,
                    init::SeedSequence& seeds);
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, H, W), plain

 private:
  std::shared_ptr<Module> avgpool_, fc1_, fc2_, activation_, scale_activation_;
};

// One block's settings after the width multiplier (torchvision's MBConvConfig / FusedMBConvConfig).
struct MBConvSettings {
  bool fused = false;
  int64_t expand_ratio, kernel, stride, in, out;
};

class MBConv : public Module {
 public:
  bool is_block() const override { return true; }
  MBConv(const MBConvSettings& s, float stochastic_depth_prob, const BnSettings& bn, const std::string& activation,
         init::SeedSequence& seeds);
  Tensor forward(const Tensor& x) override;
  const StochasticDepth& stochastic_depth() const { return *stochastic_depth_; }

 private:
  bool residual_;
  std::shared_ptr<Sequential> block_;
  std::shared_ptr<StochasticDepth> stochastic_depth_;
};

class FusedMBConv : public Module {
 public:
  bool is_block() const override { return true; }
  FusedMBConv(const MBConvSettings& s, float stochastic_depth_prob, const BnSettings& bn,
              const std::string& activation, init::SeedSequence& seeds);
  Tensor forward(const Tensor& x) override;
  const StochasticDepth& stochastic_depth() const { return *stochastic_depth_; }

 private:
  bool residual_;
  std::shared_ptr<Sequential> block_;
  std::shared_ptr<StochasticDepth> stochastic_depth_;
};

// torchvision's _make_divisible(v, 8): v rounded to the nearest multiple of 8, at least 8, and
// not below 90% of v.
int64_t make_divisible8(double v);

}  // namespace packrat
