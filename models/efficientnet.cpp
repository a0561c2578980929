#include "models/efficientnet.h"

#include <cmath>

#include "autograd/ops.h"
#include "layers/dropout.h"
#include "layers/init.h"
#include "layers/pooling.h"

namespace packrat {

EfficientNetConfig efficientnet_b0_config() {
  EfficientNetConfig c;
  // expand, kernel, stride, in, out, layers (torchvision's bneck_conf rows)
  c.stages = {{false, 1, 3, 1, 32, 16, 1},  {false, 6, 3, 2, 16, 24, 2},   {false, 6, 5, 2, 24, 40, 2},
              {false, 6, 3, 2, 40, 80, 3},  {false, 6, 5, 1, 80, 112, 3},  {false, 6, 5, 2, 112, 192, 4},
              {false, 6, 3, 1, 192, 320, 1}};
  c.bn = {1e-5f, 0.1f};
  c.dropout = 0.2f;
  return c;
}

EfficientNetConfig efficientnet_v2_s_config() {
  EfficientNetConfig c;
  c.stages = {{true, 1, 3, 1, 24, 24, 2},     {true, 4, 3, 2, 24, 48, 4},     {true, 4, 3, 2, 48, 64, 4},
              {false, 4, 3, 2, 64, 128, 6},   {false, 6, 3, 1, 128, 160, 9},  {false, 6, 3, 2, 160, 256, 15}};
  c.last_channel = 1280;
  c.bn = {1e-3f, 0.1f};
  c.dropout = 0.2f;
  return c;
}

EfficientNet::EfficientNet(const EfficientNetConfig& c) {
  PACKRAT_CHECK(!c.stages.empty(), "efficientnet: needs at least one stage");
  PACKRAT_CHECK(c.stem == "imagenet" || c.stem == "cifar", "efficientnet: unknown stem '{}' (known: imagenet, cifar)",
                c.stem);
  PACKRAT_CHECK(c.width_mult > 0 && c.depth_mult > 0, "efficientnet: width_mult {} and depth_mult {} must be positive",
                c.width_mult, c.depth_mult);
  PACKRAT_CHECK(c.in_channels > 0 && c.num_classes > 0,
                "efficientnet: in_channels {} and num_classes {} must be positive", c.in_channels, c.num_classes);
  auto width = [&](int64_t ch) { return make_divisible8(static_cast<double>(ch) * c.width_mult); };
  auto depth = [&](int64_t n) { return static_cast<int64_t>(std::ceil(static_cast<double>(n) * c.depth_mult)); };

  init::SeedSequence seeds(c.seed);
  features_ = register_module("features", std::make_shared<Sequential>());
  const int64_t stem_out = width(c.stages.front().in);
  features_->add(make_conv_bn_act(c.in_channels, stem_out, 3, c.stem == "cifar" ? 1 : 2, 1, c.bn, c.activation,
                                  seeds.next()));
  int64_t total_blocks = 0;
  for (const auto& st : c.stages) total_blocks += depth(st.layers);
  int64_t block_id = 0;
  for (const auto& st : c.stages) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < depth(st.layers); ++b, ++block_id) {
      const MBConvSettings s{st.fused, st.expand_ratio, st.kernel, b == 0 ? st.stride : 1,
                             b == 0 ? width(st.in) : width(st.out), width(st.out)};
      // torchvision: the rate rises linearly with the block's index over all blocks.
      const float sd = c.stochastic_depth_prob * static_cast<float>(block_id) / static_cast<float>(total_blocks);
      if (st.fused)
        stage->add(std::make_shared<FusedMBConv>(s, sd, c.bn, c.activation, seeds));
      else
        stage->add(std::make_shared<MBConv>(s, sd, c.bn, c.activation, seeds));
    }
    features_->add(stage);
  }
  const int64_t last_in = width(c.stages.back().out);
  const int64_t last_out = c.last_channel > 0 ? width(c.last_channel) : 4 * last_in;
  features_->add(make_conv_bn_act(last_in, last_out, 1, 1, 1, c.bn, c.activation, seeds.next()));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  classifier_ = register_module("classifier", std::make_shared<Sequential>());
  classifier_->add(std::make_shared<Dropout>(c.dropout));
  auto fc = classifier_->add(std::make_shared<Linear>(last_out, c.num_classes, true, seeds.next()));
  {
    // torchvision: U(-1/sqrt(out), 1/sqrt(out)) weights, zero bias.
    TagScope tag(MemTag::Parameter);
    PhiloxStream rng(seeds.next(), 0);
    const float range = 1.0f / std::sqrt(static_cast<float>(c.num_classes));
    init::uniform(fc->weight(), -range, range, rng);
    init::constant(fc->bias(), 0.0f);
  }
}

Tensor EfficientNet::forward(const Tensor& x) {
  Tensor y = (*features_)(x);
  y = (*avgpool_)(y);
  y = ops::flatten(y, 1);  // (N, C, 1, 1) -> (N, C), plain
  return (*classifier_)(y);
}

}  // namespace packrat
