#include "models/resnet.h"

#include "autograd/ops.h"
#include "layers/init.h"
#include "models/resnet_blocks.h"

namespace packrat {

ResNet::ResNet(const ResNetConfig& c) : c_(c) {
  PACKRAT_CHECK(c.stem == "imagenet" || c.stem == "cifar", "resnet: unknown stem '{}' (known: imagenet, cifar)",
                c.stem);
  PACKRAT_CHECK(c.in_channels > 0 && c.num_classes > 0, "resnet: in_channels {} and num_classes {} must be positive",
                c.in_channels, c.num_classes);
  init::SeedSequence seeds(c.seed);
  if (c.stem == "imagenet")
    conv1_ = register_module("conv1", make_conv(c.in_channels, 64, 7, 2, 3, ConvInit::KaimingNormalFanOut, seeds.next()));
  else
    conv1_ = register_module("conv1", make_conv(c.in_channels, 64, 3, 1, 1, ConvInit::KaimingNormalFanOut, seeds.next()));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  act_ = register_module("act", std::make_shared<Activation>(c.activation));
  if (c.stem == "imagenet") maxpool_ = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  const std::array<int64_t, 4> planes{64, 128, 256, 512};
  for (size_t i = 0; i < 4; ++i)
    layers_[i] = register_module("layer" + std::to_string(i + 1), make_stage(planes[i], c.blocks[i], i == 0 ? 1 : 2, seeds));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  const int64_t expansion = c.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  fc_ = register_module("fc", std::make_shared<Linear>(512 * expansion, c.num_classes, true, seeds.next()));
}

std::shared_ptr<Sequential> ResNet::make_stage(int64_t planes, int64_t blocks, int64_t stride,
                                               init::SeedSequence& seeds) {
  PACKRAT_CHECK(blocks > 0, "resnet: every stage needs at least one block, got {}", blocks);
  const int64_t expansion = c_.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  auto stage = std::make_shared<Sequential>();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t s = b == 0 ? stride : 1;
    BlockShortcut shortcut{"downsample", nullptr};
    if (b == 0 && (s != 1 || inplanes_ != planes * expansion)) {
      auto ds = std::make_shared<Sequential>();
      ds->add(make_conv(inplanes_, planes * expansion, 1, s, 0, ConvInit::KaimingNormalFanOut, seeds.next()));
      ds->add(std::make_shared<BatchNorm2d>(planes * expansion));
      shortcut.module = ds;
    }
    if (c_.bottleneck)
      stage->add(std::make_shared<Bottleneck>(inplanes_, planes, s, shortcut, c_.activation,
                                              ConvInit::KaimingNormalFanOut, seeds));
    else
      stage->add(std::make_shared<BasicBlock>(inplanes_, planes, s, shortcut, c_.activation,
                                              ConvInit::KaimingNormalFanOut, seeds));
    inplanes_ = planes * expansion;
  }
  return stage;
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor y = (*act_)((*bn1_)((*conv1_)(x)));
  if (maxpool_) y = (*maxpool_)(y);
  for (auto& layer : layers_) y = (*layer)(y);
  y = (*avgpool_)(y);
  y = ops::flatten(y, 1);  // (N, C, 1, 1) -> (N, C), plain
  return (*fc_)(y);
}

}  // namespace packrat
