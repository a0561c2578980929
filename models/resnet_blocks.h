#pragma once
// The residual blocks of torchvision's ResNet (BasicBlock, Bottleneck with the stride on the
// 3x3 conv, "v1.5"), with a configurable activation. Children carry torchvision's names
// (conv1, bn1, conv2, bn2[, conv3, bn3], downsample) so state dicts match; the shortcut
// child's name is given by the caller ("downsample" in torchvision, "shortcut" in the CIFAR
// ResNets). Activations are parameter-free children act1, act2[, act3].
#include <cstdint>
#include <memory>
#include <string>

#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/conv2d.h"
#include "layers/init.h"
#include "layers/module.h"

namespace packrat {

enum class ConvInit { KaimingNormalFanOut, KaimingNormalFanIn };

// Conv2d without bias whose weight is drawn with `init` (the models' convention).
std::shared_ptr<Conv2d> make_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                  ConvInit init, uint64_t seed);

struct BlockShortcut {
  std::string name;                // "downsample" or "shortcut"
  std::shared_ptr<Module> module;  // null: identity
};

class BasicBlock : public Module {
 public:
  bool is_block() const override { return true; }
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride, BlockShortcut shortcut, const std::string& activation,
             ConvInit init, init::SeedSequence& seeds);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Module> shortcut_;
  std::shared_ptr<Activation> act1_, act2_;
};

class Bottleneck : public Module {
 public:
  bool is_block() const override { return true; }
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride, BlockShortcut shortcut, const std::string& activation,
             ConvInit init, init::SeedSequence& seeds);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<Module> shortcut_;
  std::shared_ptr<Activation> act1_, act2_, act3_;
};

}  // namespace packrat
