#pragma once
// A GPT-style causal Transformer over tokens (bytes: vocab 256), after nanoGPT (Karpathy,
// model.py) and GPT-2: token + position embeddings, dropout, pre-LN blocks
//   x = x + attn(ln_1(x))        causal multi-head self-attention (layers/multihead_attention.h)
//   x = x + mlp(ln_2(x))         c_fc (D -> 4D), GELU, c_proj (4D -> D), dropout
// a final LayerNorm and an output head tied to the token embedding (lm_head.weight is
// transformer.wte.weight: one parameter, one gradient accumulated from both uses, counted once).
//
// Names (nanoGPT's, with nn.MultiheadAttention's inside the attention):
//   transformer.wte.weight (V, D)      transformer.wpe.weight (block_size, D)
//   transformer.h.<i>.ln_1.{weight,bias} (D)
//   transformer.h.<i>.attn.in_proj_weight (3D, D), .attn.in_proj_bias (3D),
//   transformer.h.<i>.attn.out_proj.{weight (D, D), bias (D)}
//   transformer.h.<i>.ln_2.{weight,bias}, .mlp.c_fc.{weight (4D, D), bias}, .mlp.c_proj.{weight (D, 4D), bias}
//   transformer.ln_f.{weight,bias}     lm_head: tied, no parameter of its own (no bias)
// Init as nanoGPT: linear and embedding weights N(0, 0.02), c_proj and out_proj weights
// N(0, 0.02 / sqrt(2 * n_layer)), biases 0, LayerNorms 1 and 0.
//
// Input tokens (N, T) i64 with T <= block_size; output logits (N, T, vocab).
#include <cstdint>
#include <memory>
#include <string>

#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layernorm.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace packrat {

struct GptConfig {
  int64_t vocab = 256, block_size = 256;  // tokens, positions
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  float dropout = 0.0f;                   // embeddings, attention probabilities, residual branches
  std::string activation = "gelu";        // the MLP's
  uint64_t seed = 0;
  std::string attention;                  // model.attention: "" (auto) | standard | memory_efficient
};

// Registered presets (models/registry.cpp): gpt_tiny, gpt_small, gpt_medium; vocab from the data.
GptConfig gpt_preset(const std::string& name);

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& c);
  Tensor forward(const Tensor& tokens) override;  // (N, T) i64 -> (N, T, vocab)
  const GptConfig& config() const { return c_; }

 private:
  GptConfig c_;
  std::shared_ptr<Module> transformer_, lm_head_;
};

}  // namespace packrat
