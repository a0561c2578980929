#pragma once
// torchvision's VisionTransformer (models/vision_transformer.py) with its parameter names:
//   class_token (1, 1, D), conv_proj.{weight,bias} (patch embedding, D x C x P x P, stride P),
//   encoder.pos_embedding (1, T, D) with T = (image / patch)^2 + 1,
//   encoder.layers.encoder_layer_<i>.{ln_1, self_attention.{in_proj_weight, in_proj_bias,
//   out_proj}, ln_2, mlp.0, mlp.3}, encoder.ln, heads.head,
// and torchvision's init (conv_proj normal with std sqrt(1/fan_in), where torchvision truncates
// at +-2; pos_embedding normal std 0.02, class token 0, MLP xavier_uniform with N(0, 1e-6)
// biases, LayerNorm eps 1e-6, heads.head zero). Pre-LN encoder blocks:
//   x = x + dropout(self_attention(ln_1(x))); x = x + mlp(ln_2(x)); mlp = Linear, GELU, Dropout,
//   Linear, Dropout. The logits come from encoder.ln of the class token.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/multihead_attention.h"
#include "layers/sequential.h"

namespace packrat {

struct VitConfig {
  int64_t image_size = 224, patch_size = 16;
  int64_t num_layers = 12, num_heads = 12, hidden_dim = 768, mlp_dim = 3072;
  float dropout = 0.0f, attention_dropout = 0.0f;
  std::string activation = "gelu";  // the MLP's (torchvision: exact GELU)
  int64_t in_channels = 3, num_classes = 1000;
  uint64_t seed = 0;
  std::string attention;  // model.attention: "" (auto) | standard | memory_efficient
};

// encoder.layers.encoder_layer_<i>
class VitEncoderBlock : public Module {
 public:
  bool is_block() const override { return true; }
  VitEncoderBlock(const VitConfig& c, uint64_t seed);
  Tensor forward(const Tensor& x) override;  // (N, T, D) -> (N, T, D)

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<MultiheadAttention> self_attention_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Sequential> mlp_;
};

// encoder: pos_embedding, dropout, layers, ln
class VitEncoder : public Module {
 public:
  VitEncoder(const VitConfig& c, int64_t seq_length, uint64_t seed);
  Tensor forward(const Tensor& x) override;  // (N, T, D) -> (N, T, D)

 private:
  Tensor pos_embedding_;  // (1, T, D)
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Sequential> layers_;
  std::shared_ptr<LayerNorm> ln_;
};

class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(const VitConfig& c);
  Tensor forward(const Tensor& x) override;  // (N, C, image, image) -> (N, num_classes)
  const VitConfig& config() const { return c_; }

 private:
  VitConfig c_;
  Tensor class_token_;  // (1, 1, D)
  std::shared_ptr<Conv2d> conv_proj_;
  std::shared_ptr<VitEncoder> encoder_;
  std::shared_ptr<Sequential> heads_;
};

}  // namespace packrat
