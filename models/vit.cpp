#include "models/vit.h"

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "layers/activation.h"
#include "layers/init.h"

namespace packrat {

namespace {

constexpr float kLayerNormEps = 1e-6f;  // torchvision: partial(nn.LayerNorm, eps=1e-6)

// torchvision's MLPBlock init: xavier_uniform_ weight, normal(std=1e-6) bias.
std::shared_ptr<Linear> mlp_linear(int64_t in, int64_t out, uint64_t seed) {
  auto l = std::make_shared<Linear>(in, out, true, seed);
  TagScope tag(MemTag::Parameter);
  PhiloxStream rng(seed, 7);
  const float bound = std::sqrt(6.0f / static_cast<float>(in + out));
  init::uniform(l->weight(), -bound, bound, rng);
  init::normal(l->bias(), 0.0f, 1e-6f, rng);
  return l;
}

}  // namespace

VitEncoderBlock::VitEncoderBlock(const VitConfig& c, uint64_t seed) {
  init::SeedSequence seeds(seed);
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(c.hidden_dim, kLayerNormEps));
  self_attention_ = register_module(
      "self_attention", std::make_shared<MultiheadAttention>(MultiheadAttentionOptions{
                            c.hidden_dim, c.num_heads, c.attention_dropout, false, seeds.next(), c.attention}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(c.hidden_dim, kLayerNormEps));
  mlp_ = register_module("mlp", std::make_shared<Sequential>());
  mlp_->add(mlp_linear(c.hidden_dim, c.mlp_dim, seeds.next()));  // mlp.0
  mlp_->add(std::make_shared<Activation>(c.activation));          // mlp.1
  mlp_->add(std::make_shared<Dropout>(c.dropout));                // mlp.2
  mlp_->add(mlp_linear(c.mlp_dim, c.hidden_dim, seeds.next()));  // mlp.3
  mlp_->add(std::make_shared<Dropout>(c.dropout));                // mlp.4
}

Tensor VitEncoderBlock::forward(const Tensor& input) {
  const Tensor x = ops::add((*dropout_)((*self_attention_)((*ln_1_)(input))), input);  // (N, T, D)
  return ops::add(x, (*mlp_)((*ln_2_)(x)));
}

VitEncoder::VitEncoder(const VitConfig& c, int64_t seq_length, uint64_t seed) {
  init::SeedSequence seeds(seed);
  {
    TagScope tag(MemTag::Parameter);
    PhiloxStream rng(seeds.next(), 0);
    Tensor pos = Tensor::empty({1, seq_length, c.hidden_dim});  // (1, T, D)
    init::normal(pos, 0.0f, 0.02f, rng);
    pos_embedding_ = register_parameter("pos_embedding", pos);
  }
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  layers_ = register_module("layers", std::make_shared<Sequential>());
  // torchvision names the blocks encoder_layer_<i> in an OrderedDict (not "0", "1", ...).
  for (int64_t i = 0; i < c.num_layers; ++i)
    layers_->add_named("encoder_layer_" + std::to_string(i), std::make_shared<VitEncoderBlock>(c, seeds.next()));
  ln_ = register_module("ln", std::make_shared<LayerNorm>(c.hidden_dim, kLayerNormEps));
}

Tensor VitEncoder::forward(const Tensor& x) {
  PACKRAT_CHECK(x.rank() == 3 && x.dim(1) == pos_embedding_.dim(1) && x.dim(2) == pos_embedding_.dim(2),
                "vit encoder {}: expects (N, {}, {}), got {}", LayerScope::current(), pos_embedding_.dim(1),
                pos_embedding_.dim(2), x.shape().str());
  return (*ln_)((*layers_)((*dropout_)(ops::add(x, pos_embedding_))));
}

VisionTransformer::VisionTransformer(const VitConfig& c) : c_(c) {
  PACKRAT_CHECK(c.image_size > 0 && c.patch_size > 0, "vit: image size {} and patch size {} must be positive",
                c.image_size, c.patch_size);
  PACKRAT_CHECK(c.image_size % c.patch_size == 0,
                "vit: model.image_size {} is not divisible by model.patch_size {}", c.image_size, c.patch_size);
  PACKRAT_CHECK(c.num_layers > 0 && c.hidden_dim > 0 && c.mlp_dim > 0 && c.num_heads > 0,
                "vit: layers {}, hidden dim {}, mlp dim {}, heads {} must be positive", c.num_layers, c.hidden_dim,
                c.mlp_dim, c.num_heads);
  PACKRAT_CHECK(c.hidden_dim % c.num_heads == 0, "vit: model.hidden_dim {} is not divisible by model.num_heads {}",
                c.hidden_dim, c.num_heads);
  init::SeedSequence seeds(c.seed);
  const int64_t D = c.hidden_dim, P = c.patch_size;
  {
    TagScope tag(MemTag::Parameter);
    class_token_ = register_parameter("class_token", Tensor::zeros({1, 1, D}));
  }
  ConvConfig cc;
  cc.stride = P;
  conv_proj_ = register_module("conv_proj", std::make_shared<Conv2d>(c.in_channels, D, P, cc, seeds.next()));
  {
    // torchvision: trunc_normal_(std = sqrt(1 / fan_in)), truncated at +-2 (absolute): for
    // fan_in >= 16 that is 8 std or more out, so a plain normal is the same in practice. Bias 0.
    TagScope tag(MemTag::Parameter);
    PhiloxStream rng(seeds.next(), 0);
    const float fan_in = static_cast<float>(c.in_channels * P * P);
    init::normal(conv_proj_->weight(), 0.0f, std::sqrt(1.0f / fan_in), rng);
    init::constant(conv_proj_->bias(), 0.0f);
  }
  const int64_t side = c.image_size / P;
  encoder_ = register_module("encoder", std::make_shared<VitEncoder>(c, side * side + 1, seeds.next()));
  heads_ = register_module("heads", std::make_shared<Sequential>());
  auto head = heads_->add_named("head", std::make_shared<Linear>(D, c.num_classes, true, seeds.next()));
  init::constant(head->weight(), 0.0f);  // torchvision zeroes the head
  init::constant(head->bias(), 0.0f);
}

Tensor VisionTransformer::forward(const Tensor& x) {
  const int64_t D = c_.hidden_dim;
  PACKRAT_CHECK(x.rank() == 4 && x.dim(1) == c_.in_channels && x.dim(2) == c_.image_size && x.dim(3) == c_.image_size,
                "vit: expects input (N, {}, {}, {}) (model.image_size), got {}", c_.in_channels, c_.image_size,
                c_.image_size, x.shape().str());
  const int64_t N = x.dim(0), side = c_.image_size / c_.patch_size;
  // (N, D, side, side) -> (N, D, side^2) -> (N, side^2, D)
  const Tensor patches = ops::transpose_last2(ops::reshape((*conv_proj_)(x), Shape{N, D, side * side}));
  Tensor tokens;  // (N, 1 + side^2, D)
  {
    LayerScope scope("class_token");
    tokens = ops::concat({ops::expand(class_token_, Shape{N, 1, D}), patches}, 1);
  }
  const Tensor enc = (*encoder_)(tokens);  // (N, T, D)
  Tensor cls;                              // (N, D): the class token's features
  {
    LayerScope scope("encoder");
    cls = ops::reshape(ops::narrow(enc, 1, 0, 1), Shape{N, D});
  }
  return (*heads_)(cls);
}

}  // namespace packrat
