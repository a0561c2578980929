#include "models/resnet_blocks.h"

#include "autograd/ops.h"

namespace packrat {

std::shared_ptr<Conv2d> make_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                  ConvInit init, uint64_t seed) {
  ConvConfig c;
  c.stride = stride;
  c.padding = padding;
  c.bias = false;
  auto conv = std::make_shared<Conv2d>(in, out, kernel, c, seed);
  PhiloxStream rng(seed, 2);
  if (init == ConvInit::KaimingNormalFanOut)
    init::kaiming_normal_fan_out(conv->weight(), rng);
  else
    init::kaiming_normal_fan_in(conv->weight(), rng);
  return conv;
}

BasicBlock::BasicBlock(int64_t in, int64_t planes, int64_t stride, BlockShortcut shortcut,
                       const std::string& activation, ConvInit init, init::SeedSequence& seeds) {
  conv1_ = register_module("conv1", make_conv(in, planes, 3, stride, 1, init, seeds.next()));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  act1_ = register_module("act1", std::make_shared<Activation>(activation));
  conv2_ = register_module("conv2", make_conv(planes, planes, 3, 1, 1, init, seeds.next()));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (shortcut.module) shortcut_ = register_module(shortcut.name, shortcut.module);
  act2_ = register_module("act2", std::make_shared<Activation>(activation));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*act1_)((*bn1_)((*conv1_)(x)));
  out = (*bn2_)((*conv2_)(out));
  const Tensor identity = shortcut_ ? (*shortcut_)(x) : x;
  return (*act2_)(ops::add(out, identity));
}

Bottleneck::Bottleneck(int64_t in, int64_t planes, int64_t stride, BlockShortcut shortcut,
                       const std::string& activation, ConvInit init, init::SeedSequence& seeds) {
  const int64_t width = planes;  // groups 1, base width 64
  conv1_ = register_module("conv1", make_conv(in, width, 1, 1, 0, init, seeds.next()));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(width));
  act1_ = register_module("act1", std::make_shared<Activation>(activation));
  conv2_ = register_module("conv2", make_conv(width, width, 3, stride, 1, init, seeds.next()));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(width));
  act2_ = register_module("act2", std::make_shared<Activation>(activation));
  conv3_ = register_module("conv3", make_conv(width, planes * kExpansion, 1, 1, 0, init, seeds.next()));
  bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion));
  if (shortcut.module) shortcut_ = register_module(shortcut.name, shortcut.module);
  act3_ = register_module("act3", std::make_shared<Activation>(activation));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*act1_)((*bn1_)((*conv1_)(x)));
  out = (*act2_)((*bn2_)((*conv2_)(out)));
  out = (*bn3_)((*conv3_)(out));
  const Tensor identity = shortcut_ ? (*shortcut_)(x) : x;
  return (*act3_)(ops::add(out, identity));
}

}  // namespace packrat
