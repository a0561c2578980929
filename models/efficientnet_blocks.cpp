#include "models/efficientnet_blocks.h"

#include <algorithm>

#include "autograd/ops.h"
#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/pooling.h"

namespace packrat {

int64_t make_divisible8(double v) {
  constexpr int64_t divisor = 8;
  int64_t r = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(r) < 0.9 * v) r += divisor;
  return r;
}

std::shared_ptr<Conv2d> make_efficientnet_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                               bool bias, uint64_t seed) {
  ConvConfig c;
  c.stride = stride;
  c.padding = (kernel - 1) / 2;
  c.groups = groups;
  c.bias = bias;
  auto conv = std::make_shared<Conv2d>(in, out, kernel, c, seed);
  PhiloxStream rng(seed, 2);
  init::kaiming_normal_fan_out(conv->weight(), rng);
  if (bias) init::constant(conv->bias(), 0.0f);
  return conv;
}

std::shared_ptr<Sequential> make_conv_bn_act(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                             const BnSettings& bn, const std::string& activation, uint64_t seed) {
  auto s = std::make_shared<Sequential>();
  s->add(make_efficientnet_conv(in, out, kernel, stride, groups, false, seed));
  s->add(std::make_shared<BatchNorm2d>(out, bn.momentum, bn.eps));
  if (!activation.empty()) s->add(std::make_shared<Activation>(activation));
  return s;
}

SqueezeExcitation::SqueezeExcitation(int64_t channels, int64_t squeeze_channels, const std::string& activation,
                                     init::SeedSequence& seeds) {
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  fc1_ = register_module("fc1", make_efficientnet_conv(channels, squeeze_channels, 1, 1, 1, true, seeds.next()));
  fc2_ = register_module("fc2", make_efficientnet_conv(squeeze_channels, channels, 1, 1, 1, true, seeds.next()));
  activation_ = register_module("activation", std::make_shared<Activation>(activation));
  scale_activation_ = register_module("scale_activation", std::make_shared<Activation>("sigmoid"));
}

Tensor SqueezeExcitation::forward(const Tensor& x) {
  Tensor scale = (*avgpool_)(x);                                       // (N, C, 1, 1)
  scale = (*scale_activation_)((*fc2_)((*activation_)((*fc1_)(scale))));  // (N, C, 1, 1)
  return ops::mul(scale, x);                                           // (N, C, H, W)
}

namespace {

// The residual branch's output plus the block input, after stochastic depth (torchvision's order).
Tensor residual_sum(StochasticDepth& sd, const Tensor& branch, const Tensor& x) { return ops::add(sd(branch), x); }

}  // namespace

MBConv::MBConv(const MBConvSettings& s, float stochastic_depth_prob, const BnSettings& bn,
               const std::string& activation, init::SeedSequence& seeds)
    : residual_(s.stride == 1 && s.in == s.out) {
  PACKRAT_CHECK(s.stride == 1 || s.stride == 2, "MBConv: stride must be 1 or 2, got {}", s.stride);
  const int64_t expanded = make_divisible8(static_cast<double>(s.in * s.expand_ratio));
  block_ = register_module("block", std::make_shared<Sequential>());
  if (expanded != s.in) block_->add(make_conv_bn_act(s.in, expanded, 1, 1, 1, bn, activation, seeds.next()));
  block_->add(make_conv_bn_act(expanded, expanded, s.kernel, s.stride, expanded, bn, activation, seeds.next()));
  block_->add(std::make_shared<SqueezeExcitation>(expanded, std::max<int64_t>(1, s.in / 4), activation, seeds));
  block_->add(make_conv_bn_act(expanded, s.out, 1, 1, 1, bn, "", seeds.next()));
  stochastic_depth_ = register_module("stochastic_depth", std::make_shared<StochasticDepth>(stochastic_depth_prob));
}

Tensor MBConv::forward(const Tensor& x) {
  const Tensor branch = (*block_)(x);
  return residual_ ? residual_sum(*stochastic_depth_, branch, x) : branch;
}

FusedMBConv::FusedMBConv(const MBConvSettings& s, float stochastic_depth_prob, const BnSettings& bn,
                         const std::string& activation, init::SeedSequence& seeds)
    : residual_(s.stride == 1 && s.in == s.out) {
  PACKRAT_CHECK(s.stride == 1 || s.stride == 2, "FusedMBConv: stride must be 1 or 2, got {}", s.stride);
  const int64_t expanded = make_divisible8(static_cast<double>(s.in * s.expand_ratio));
  block_ = register_module("block", std::make_shared<Sequential>());
  if (expanded != s.in) {
    block_->add(make_conv_bn_act(s.in, expanded, s.kernel, s.stride, 1, bn, activation, seeds.next()));
    block_->add(make_conv_bn_act(expanded, s.out, 1, 1, 1, bn, "", seeds.next()));
  } else {
    block_->add(make_conv_bn_act(s.in, s.out, s.kernel, s.stride, 1, bn, activation, seeds.next()));
  }
  stochastic_depth_ = register_module("stochastic_depth", std::make_shared<StochasticDepth>(stochastic_depth_prob));
}

Tensor FusedMBConv::forward(const Tensor& x) {
  const Tensor branch = (*block_)(x);
  return residual_ ? residual_sum(*stochastic_depth_, branch, x) : branch;
}

}  // namespace packrat
