#pragma once
// nn.MultiheadAttention for self-attention with batch_first=True: x (N, T, D) -> (N, T, D), with
// PyTorch's parameter names and shapes: in_proj_weight (3D, D), in_proj_bias (3D),
// out_proj.weight (D, D), out_proj.bias (D), and its init (xavier_uniform in_proj_weight, zero
// biases, out_proj.weight as nn.Linear). `causal`: query t attends to keys <= t (GPT).
// Attention dropout (on the softmax output, training only) draws from Philox like Dropout.
#include <cstdint>
#include <memory>

#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace packrat {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0, num_heads = 1;
  float dropout = 0.0f;  // on the attention weights
  bool causal = false;
  uint64_t seed = 0;
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& o);
  Tensor forward(const Tensor& x) override;  // (N, T, D) -> (N, T, D)

  Tensor& in_proj_weight() { return in_proj_weight_; }
  Tensor& in_proj_bias() { return in_proj_bias_; }
  Linear& out_proj() { return *out_proj_; }
  const MultiheadAttentionOptions& options() const { return o_; }

 protected:
  std::vector<std::pair<std::string, MaskStream*>> own_mask_streams() override {
    return {{"attn_dropout", &attn_dropout_.mask_stream()}};
  }

 private:
  MultiheadAttentionOptions o_;
  Tensor in_proj_weight_, in_proj_bias_;  // (3D, D), (3D)
  std::shared_ptr<Linear> out_proj_;
  Dropout attn_dropout_;  // not a child: holds the Philox stream of the attention dropout
};

}  // namespace packrat
