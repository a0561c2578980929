#include "models/gpt.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "layers/activation.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/multihead_attention.h"

namespace packrat {

namespace {

// mlp: c_fc (D -> 4D), GELU, c_proj (4D -> D), dropout.
class GptMlp : public Module {
 public:
  GptMlp(const GptConfig& c, init::SeedSequence& seeds) {
    c_fc_ = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, true, seeds.next()));
    act_ = register_module("act", std::make_shared<Activation>(c.activation));
    c_proj_ = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, true, seeds.next()));
    drop_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  }
  Tensor forward(const Tensor& x) override { return (*drop_)((*c_proj_)((*act_)((*c_fc_)(x)))); }  // (N, T, D)

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<Activation> act_;
  std::shared_ptr<Dropout> drop_;
};

// transformer.h.<i>: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class GptBlock : public Module {
 public:
  bool is_block() const override { return true; }
  GptBlock(const GptConfig& c, init::SeedSequence& seeds) {
    ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
    MultiheadAttentionOptions a;
    a.embed_dim = c.n_embd;
    a.num_heads = c.n_head;
    a.dropout = c.dropout;
    a.causal = true;
    a.seed = seeds.next();
    a.attention = c.attention;
    attn_ = register_module("attn", std::make_shared<MultiheadAttention>(a));
    resid_drop_ = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
    ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
    mlp_ = register_module("mlp", std::make_shared<GptMlp>(c, seeds));
  }
  Tensor forward(const Tensor& x) override {  // (N, T, D) -> (N, T, D)
    Tensor h = ops::add(x, (*resid_drop_)((*attn_)((*ln_1_)(x))));
    return ops::add(h, (*mlp_)((*ln_2_)(h)));
  }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<MultiheadAttention> attn_;
  std::shared_ptr<Dropout> resid_drop_;
  std::shared_ptr<GptMlp> mlp_;
};

// transformer: wte, wpe, drop, h.<i>, ln_f; tokens (N, T) -> final hidden states (N, T, D).
class GptTransformer : public Module {
 public:
  GptTransformer(const GptConfig& c, init::SeedSequence& seeds) : c_(c) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab, c.n_embd, seeds.next()));
    wpe_ = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, seeds.next()));
    drop_ = register_module("drop", std::make_shared<Dropout>(c.dropout));
    h_ = register_module("h", std::make_shared<Sequential>());
    for (int64_t i = 0; i < c.n_layer; ++i) h_->add(std::make_shared<GptBlock>(c, seeds));
    ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd));
  }
  Tensor forward(const Tensor& tokens) override {
    PACKRAT_CHECK(tokens.defined() && tokens.rank() == 2 && tokens.dtype() == DType::i64,
                  "gpt: expects tokens (N, T) i64, got {}",
                  tokens.defined() ? tokens.describe() : std::string("an undefined tensor"));
    const int64_t n = tokens.dim(0), t = tokens.dim(1);
    PACKRAT_CHECK(t <= c_.block_size,
                  "gpt: the input has {} tokens per sequence, more than the position table transformer.wpe holds "
                  "(block_size {}): set data.seq_len to at most {}",
                  t, c_.block_size, c_.block_size);
    Tensor x = (*drop_)(ops::add((*wte_)(tokens), (*wpe_)(position_ids(n, t, tokens.device()))));  // (N, T, D)
    return (*ln_f_)((*h_)(x));
  }
  Tensor& token_embedding() { return wte_->weight(); }

 private:
  GptConfig c_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<Sequential> h_;
  std::shared_ptr<LayerNorm> ln_f_;
};

// lm_head: logits = x @ wte.weight^T, the token embedding used as the output weight (tied; not
// registered again, so it is one parameter and its two gradients accumulate into one).
class TiedHead : public Module {
 public:
  explicit TiedHead(Tensor weight) : weight_(std::move(weight)) {}
  Tensor forward(const Tensor& x) override { return ops::linear(x, weight_, Tensor()); }  // (N, T, D) -> (N, T, V)

 private:
  Tensor weight_;  // (V, D), shared with transformer.wte.weight
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GptConfig gpt_preset(const std::string& name) {
  GptConfig c;
  if (name == "gpt_tiny") {
    c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 128;
  } else if (name == "gpt_small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.block_size = 256;
  } else if (name == "gpt_medium") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256, c.dropout = 0.2f;
  } else {
    fail("model: unknown GPT preset '{}' (known: gpt_tiny, gpt_small, gpt_medium)", name);
  }
  return c;
}

Gpt::Gpt(const GptConfig& c) : c_(c) {
  PACKRAT_CHECK(c.vocab > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
                "gpt: vocab {}, block_size {}, n_layer {}, n_head {}, n_embd {} must all be positive", c.vocab,
                c.block_size, c.n_layer, c.n_head, c.n_embd);
  PACKRAT_CHECK(c.n_embd % c.n_head == 0, "gpt: n_embd {} is not divisible by n_head {}", c.n_embd, c.n_head);
  PACKRAT_CHECK(c.dropout >= 0.0f && c.dropout < 1.0f, "gpt: dropout {} must be in [0, 1)", c.dropout);
  init::SeedSequence seeds(c.seed);
  auto transformer = std::make_shared<GptTransformer>(c, seeds);
  transformer_ = register_module("transformer", transformer);
  lm_head_ = register_module("lm_head", std::make_shared<TiedHead>(transformer->token_embedding()));
  // nanoGPT's init (_init_weights and the scaled c_proj), drawn from one stream per parameter.
  TagScope tag(MemTag::Parameter);
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  uint64_t stream = 0;
  for (auto& [name, p] : named_parameters()) {
    PhiloxStream rng(c.seed, 0x6970ull << 32 | stream++);
    if (name.find(".ln_") != std::string::npos) continue;  // LayerNorm: 1 and 0
    if (p.rank() == 1) init::constant(p, 0.0f);
    else if (ends_with(name, "c_proj.weight") || ends_with(name, "out_proj.weight")) init::normal(p, 0.0f, proj_std, rng);
    else init::normal(p, 0.0f, 0.02f, rng);
  }
}

Tensor Gpt::forward(const Tensor& tokens) { return (*lm_head_)((*transformer_)(tokens)); }

}  // namespace packrat
