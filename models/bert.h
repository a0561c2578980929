#pragma once
// A BERT-style bidirectional encoder over byte tokens (Devlin et al., 2019), with PyTorch's
// nn.TransformerEncoder inside, so that `encoder.*` of a packrat checkpoint loads with strict=True
// into nn.TransformerEncoder(nn.TransformerEncoderLayer(D, heads, intermediate, dropout, "gelu",
// layer_norm_eps=1e-12, batch_first=True, norm_first), layers) (tests/golden/make_bert_golden.py
// builds exactly that):
//
//   embeddings.word_embeddings.weight (V, D)        embeddings.position_embeddings.weight (P, D)
//   embeddings.token_type_embeddings.weight (2, D)  embeddings.norm.{weight,bias} (D)
//   encoder.layers.<i>.self_attn.in_proj_weight (3D, D), .self_attn.in_proj_bias (3D),
//   encoder.layers.<i>.self_attn.out_proj.{weight (D, D), bias (D)}
//   encoder.layers.<i>.linear1.{weight (I, D), bias (I)}, .linear2.{weight (D, I), bias (D)}
//   encoder.layers.<i>.norm1.{weight,bias}, .norm2.{weight,bias} (D)
//   encoder.norm.{weight,bias} (D)                   pre-LN only (nn.TransformerEncoder's `norm`)
//   head "classes": pooler.dense.{weight (D, D), bias} -> tanh, dropout, classifier.{weight (C, D), bias (C)}
//   head "tokens" (masked-language model): mlm.dense.{weight (D, D), bias}, GELU, mlm.norm.{weight,bias},
//                  then logits = x word_embeddings.weight^T + mlm.bias (V): the decoder is tied
//
// Layer i, post-LN as BERT (norm_first false): x = norm1(x + dropout1(self_attn(x)));
// x = norm2(x + dropout2(linear2(dropout(act(linear1(x)))))). Pre-LN (norm_first true):
// x = x + dropout1(self_attn(norm1(x))); x = x + dropout2(linear2(...(norm2(x)))), and encoder.norm
// after the last layer. Embeddings: word + position + token type 0 (one segment), LayerNorm, dropout.
//
// Input tokens (N, T) i64, T <= max_positions. Padding: every key at or after a row's first
// data::kPadToken (data/tokens.h) is masked for every query of that row (key padding, as
// src_key_padding_mask in PyTorch); the pad positions' own outputs are computed but unused.
// Output: "classes" logits (N, C) from the first position (data::kClsToken's), "tokens" logits
// (N, T, V).
// Init as BERT: linear and embedding weights N(0, 0.02), biases 0, LayerNorms 1 and 0.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/module.h"

namespace packrat {

struct BertConfig {
  int64_t vocab = 256, max_positions = 512, type_vocab = 2;
  int64_t layers = 2, heads = 2, hidden = 128, intermediate = 512;
  float dropout = 0.1f, attention_dropout = 0.1f;
  std::string activation = "gelu";  // the feed-forward's
  bool norm_first = false;          // pre-LN (true) or BERT's post-LN
  std::string head = "classes";     // classes | tokens
  int64_t num_classes = 2;          // head "classes"
  std::string attention;            // model.attention: "" (auto) | standard | memory_efficient
  uint64_t seed = 0;
};

// Registered presets (models/registry.cpp), BERT's widths, depths and heads (Turc et al.'s
// miniatures for tiny and small): bert_tiny (2 x 128, 2 heads), bert_small (4 x 512, 8 heads),
// bert_base (12 x 768, 12 heads), bert_large (24 x 1024, 16 heads); intermediate 4 D.
BertConfig bert_preset(const std::string& name);

class Bert : public Module {
 public:
  explicit Bert(const BertConfig& c);
  Tensor forward(const Tensor& tokens) override;  // (N, T) i64 -> (N, C) or (N, T, V)
  const BertConfig& config() const { return c_; }

 private:
  BertConfig c_;
  std::shared_ptr<Module> embeddings_, encoder_;
  std::shared_ptr<Module> pooler_, head_dropout_;  // head "classes" only
  std::shared_ptr<Module> head_;                   // classifier, or mlm
};

}  // namespace packrat
