#pragma once
// nn.MultiheadAttention for self-attention with batch_first=True: x (N, T, D) -> (N, T, D), with
// PyTorch's parameter names and shapes: in_proj_weight (3D, D), in_proj_bias (3D),
// out_proj.weight (D, D), out_proj.bias (D), and its init (xavier_uniform in_proj_weight, zero
// biases, out_proj.weight as nn.Linear). `causal`: query t attends to keys <= t (GPT).
// Attention dropout (on the softmax output, training only) draws from Philox like Dropout.
// `attention` picks the algorithm of autograd/ops.h: "standard", "memory_efficient", or "" (auto:
// attention_algorithm below).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace packrat {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0, num_heads = 1;
  float dropout = 0.0f;  // on the attention weights
  bool causal = false;
  uint64_t seed = 0;
  std::string attention;  // "" (auto) | standard | memory_efficient
};

// What model.attention "" means: memory_efficient on the CPU from kAutoMemoryEfficientFrom keys on
// (where the tiled kernel measured at least as fast as the standard path: docs/attention.md),
// standard below that and on GPUs (the CUDA kernel is a warp per query row, not yet measured
// against cuBLAS on a GPU).
constexpr int64_t kAutoMemoryEfficientFrom = 512;
bool use_memory_efficient(const std::string& attention, Device device, int64_t keys);

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& o);
  Tensor forward(const Tensor& x) override;  // (N, T, D) -> (N, T, D)
  // Key padding for the forwards that follow (until set again): sample n attends to its first
  // key_lengths[n] positions only ((N) i64 on x's device; undefined: all keys). The model sets it
  // per batch before its layers run (a recomputed layer runs again with the same lengths).
  void set_key_lengths(Tensor key_lengths) { key_lengths_ = std::move(key_lengths); }

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
  Tensor key_lengths_;    // (N) i64, or undefined
};

}  // namespace packrat
