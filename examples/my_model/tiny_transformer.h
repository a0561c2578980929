#pragma once
// A small Transformer of your own for images: 4x4 patches embedded by a strided convolution,
// one pre-LN encoder block (self-attention and a GELU MLP, each added to its input), the mean
// over the patches and a linear head. Attribute names follow PyTorch's: `patch_embed.weight`,
// `block.attn.in_proj_weight`, `block.mlp.0.weight`, `head.weight`. The block says it is one
// (is_block), so `memory.recompute: [blocks]` recomputes it.
#include <memory>
#include <string>

#include "autograd/ops.h"
#include "layers/activation.h"
#include "layers/conv2d.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/multihead_attention.h"
#include "layers/sequential.h"
#include "models/registry.h"

namespace my_model {

// x + attn(ln_1(x)), then + mlp(ln_2(x)): (N, T, D) -> (N, T, D).
class EncoderBlock : public packrat::Module {
 public:
  EncoderBlock(int64_t dim, int64_t heads, const std::string& activation, uint64_t seed) {
    using namespace packrat;
    ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(dim));
    attn_ = register_module("attn", std::make_shared<MultiheadAttention>(
                                        MultiheadAttentionOptions{.embed_dim = dim, .num_heads = heads, .seed = seed}));
    ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(dim));
    mlp_ = register_module("mlp", std::make_shared<Sequential>());
    mlp_->add(std::make_shared<Linear>(dim, 2 * dim, true, seed + 1));  // mlp.0
    mlp_->add(std::make_shared<Activation>(activation));
    mlp_->add(std::make_shared<Linear>(2 * dim, dim, true, seed + 2));  // mlp.2
  }
  bool is_block() const override { return true; }
  packrat::Tensor forward(const packrat::Tensor& x) override {
    using namespace packrat;
    const Tensor h = ops::add(x, (*attn_)((*ln_1_)(x)));
    return ops::add(h, (*mlp_)((*ln_2_)(h)));
  }

 private:
  std::shared_ptr<packrat::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<packrat::MultiheadAttention> attn_;
  std::shared_ptr<packrat::Sequential> mlp_;
};

class TinyTransformer : public packrat::Module {
 public:
  TinyTransformer(int64_t in_channels, int64_t classes, const std::string& activation, uint64_t seed,
                  int64_t dim = 64, int64_t heads = 4, int64_t patch = 4)
      : dim_(dim) {
    using namespace packrat;
    patch_embed_ = register_module(
        "patch_embed", std::make_shared<Conv2d>(in_channels, dim, patch, ConvConfig{.stride = patch}, seed + 1));
    block_ = register_module("block", std::make_shared<EncoderBlock>(dim, heads, activation, seed + 2));
    ln_ = register_module("ln", std::make_shared<LayerNorm>(dim));
    head_ = register_module("head", std::make_shared<Linear>(dim, classes, true, seed + 5));
  }
  packrat::Tensor forward(const packrat::Tensor& x) override {  // (N, C, H, W) -> (N, classes)
    using namespace packrat;
    const Tensor p = (*patch_embed_)(x);  // (N, D, H/P, W/P)
    const int64_t n = p.dim(0), t = p.dim(2) * p.dim(3);
    const std::array<int64_t, 3> to_tokens{0, 2, 1};
    Tensor tokens = ops::permute(ops::reshape(p, Shape{n, dim_, t}), to_tokens);  // (N, T, D)
    tokens = (*ln_)((*block_)(tokens));
    // The mean over the patches: a (T) row of 1/T times the tokens.
    const Tensor mean = ops::scale(ops::matmul(Tensor::full(Shape{n, 1, t}, 1.0f), tokens), 1.0f / static_cast<float>(t));
    return (*head_)(ops::reshape(mean, Shape{n, dim_}));
  }

 private:
  int64_t dim_;
  std::shared_ptr<packrat::Conv2d> patch_embed_;
  std::shared_ptr<EncoderBlock> block_;
  std::shared_ptr<packrat::LayerNorm> ln_;
  std::shared_ptr<packrat::Linear> head_;
};

// `model.arch: tiny_transformer`; reads model.activation, model.classes and model.in_channels.
inline packrat::ModelKind tiny_transformer_kind() {
  return {[](const packrat::ModelSpec& s) {
            return std::make_shared<TinyTransformer>(s.in_channels, s.num_classes,
                                                     s.activation.empty() ? "gelu" : s.activation, s.seed);
          },
          {"activation", "classes", "in_channels"}, false, "gelu"};
}

}  // namespace my_model
