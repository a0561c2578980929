#include "models/cifar_resnet.h"

#include "autograd/ops.h"
#include "layers/shortcut_a.h"
#include "models/resnet_blocks.h"

namespace packrat {

CifarResNet::CifarResNet(const CifarResNetConfig& c) : c_(c) {
  PACKRAT_CHECK(c.depth >= 8 && (c.depth - 2) % 6 == 0, "cifar resnet: depth must be 6n+2 (20, 32, 44, 56, 110), got {}",
                c.depth);
  PACKRAT_CHECK(c.in_channels > 0 && c.num_classes > 0,
                "cifar resnet: in_channels {} and num_classes {} must be positive", c.in_channels, c.num_classes);
  const int64_t n = (c.depth - 2) / 6;
  init::SeedSequence seeds(c.seed);
  conv1_ = register_module("conv1", make_conv(c.in_channels, 16, 3, 1, 1, ConvInit::KaimingNormalFanIn, seeds.next()));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(16));
  act_ = register_module("act", std::make_shared<Activation>(c.activation));
  const std::array<int64_t, 3> planes{16, 32, 64};
  for (size_t i = 0; i < 3; ++i)
    layers_[i] = register_module("layer" + std::to_string(i + 1), make_stage(planes[i], n, i == 0 ? 1 : 2, seeds));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  fc_ = register_module("fc", std::make_shared<Linear>(64, c.num_classes, true, seeds.next()));
}

std::shared_ptr<Sequential> CifarResNet::make_stage(int64_t planes, int64_t blocks, int64_t stride,
                                                    init::SeedSequence& seeds) {
  auto stage = std::make_shared<Sequential>();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t s = b == 0 ? stride : 1;
    BlockShortcut shortcut{"shortcut", nullptr};
    if (s != 1 || inplanes_ != planes) shortcut.module = std::make_shared<ShortcutA>(inplanes_, planes, s);
    stage->add(std::make_shared<BasicBlock>(inplanes_, planes, s, shortcut, c_.activation, ConvInit::KaimingNormalFanIn,
                                            seeds));
    inplanes_ = planes;
  }
  return stage;
}

Tensor CifarResNet::forward(const Tensor& x) {
  Tensor y = (*act_)((*bn1_)((*conv1_)(x)));
  for (auto& layer : layers_) y = (*layer)(y);
  y = (*avgpool_)(y);
  y = ops::flatten(y, 1);  // (N, 64, 1, 1) -> (N, 64), plain
  return (*fc_)(y);
}

}  // namespace packrat
