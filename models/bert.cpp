#include "models/bert.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "data/tokens.h"
#include "layers/activation.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/init.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/multihead_attention.h"
#include "layers/sequential.h"

namespace packrat {

namespace {

constexpr float kLayerNormEps = 1e-12f;  // BERT's

// embeddings: word + position + token type 0, LayerNorm, dropout: tokens (N, T) -> (N, T, D).
class BertEmbeddings : public Module {
 public:
  BertEmbeddings(const BertConfig& c, init::SeedSequence& seeds) {
    word_ = register_module("word_embeddings", std::make_shared<Embedding>(c.vocab, c.hidden, seeds.next()));
    position_ = register_module("position_embeddings",
                                std::make_shared<Embedding>(c.max_positions, c.hidden, seeds.next()));
    type_ = register_module("token_type_embeddings", std::make_shared<Embedding>(c.type_vocab, c.hidden, seeds.next()));
    norm_ = register_module("norm", std::make_shared<LayerNorm>(c.hidden, kLayerNormEps));
    drop_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  }
  Tensor forward(const Tensor& tokens) override {
    const int64_t n = tokens.dim(0), t = tokens.dim(1);
    Tensor types = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, tokens.device());  // (N, T)
    backend_of(types).fill(types, 0.0);  // one segment: token type 0 everywhere
    const Tensor positions = position_ids(n, t, tokens.device());
    const Tensor x = ops::add(ops::add((*word_)(tokens), (*position_)(positions)), (*type_)(types));  // (N, T, D)
    return (*drop_)((*norm_)(x));
  }
  Tensor& word_weight() { return word_->weight(); }

 private:
  std::shared_ptr<Embedding> word_, position_, type_;
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Dropout> drop_;
};

// encoder.layers.<i>: nn.TransformerEncoderLayer (post-LN or pre-LN).
class BertLayer : public Module {
 public:
  bool is_block() const override { return true; }
  BertLayer(const BertConfig& c, init::SeedSequence& seeds) : norm_first_(c.norm_first) {
    MultiheadAttentionOptions a;
    a.embed_dim = c.hidden;
    a.num_heads = c.heads;
    a.dropout = c.attention_dropout;
    a.seed = seeds.next();
    a.attention = c.attention;
    self_attn_ = register_module("self_attn", std::make_shared<MultiheadAttention>(a));
    linear1_ = register_module("linear1", std::make_shared<Linear>(c.hidden, c.intermediate, true, seeds.next()));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
    linear2_ = register_module("linear2", std::make_shared<Linear>(c.intermediate, c.hidden, true, seeds.next()));
    norm1_ = register_module("norm1", std::make_shared<LayerNorm>(c.hidden, kLayerNormEps));
    norm2_ = register_module("norm2", std::make_shared<LayerNorm>(c.hidden, kLayerNormEps));
    dropout1_ = register_module("dropout1", std::make_shared<Dropout>(c.dropout));
    dropout2_ = register_module("dropout2", std::make_shared<Dropout>(c.dropout));
    act_ = register_module("activation", std::make_shared<Activation>(c.activation));
  }
  void set_key_lengths(const Tensor& lengths) { self_attn_->set_key_lengths(lengths); }
  Tensor forward(const Tensor& x) override {  // (N, T, D) -> (N, T, D)
    auto attention = [&](const Tensor& h) { return (*dropout1_)((*self_attn_)(h)); };
    auto feed_forward = [&](const Tensor& h) {
      return (*dropout2_)((*linear2_)((*dropout_)((*act_)((*linear1_)(h)))));
    };
    if (norm_first_) {
      const Tensor h = ops::add(x, attention((*norm1_)(x)));
      return ops::add(h, feed_forward((*norm2_)(h)));
    }
    const Tensor h = (*norm1_)(ops::add(x, attention(x)));
    return (*norm2_)(ops::add(h, feed_forward(h)));
  }

 private:
  bool norm_first_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<Activation> act_;
};

// encoder: layers.<i> (and norm when pre-LN), as nn.TransformerEncoder.
class BertEncoder : public Module {
 public:
  BertEncoder(const BertConfig& c, init::SeedSequence& seeds) {
    layers_ = register_module("layers", std::make_shared<Sequential>());
    for (int64_t i = 0; i < c.layers; ++i) {
      auto layer = std::make_shared<BertLayer>(c, seeds);
      blocks_.push_back(layer);
      layers_->add(layer);
    }
    if (c.norm_first) norm_ = register_module("norm", std::make_shared<LayerNorm>(c.hidden, kLayerNormEps));
  }
  void set_key_lengths(const Tensor& lengths) {
    for (auto& b : blocks_) b->set_key_lengths(lengths);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*layers_)(x);
    return norm_ ? (*norm_)(h) : h;
  }

 private:
  std::shared_ptr<Sequential> layers_;
  std::vector<std::shared_ptr<BertLayer>> blocks_;
  std::shared_ptr<LayerNorm> norm_;
};

// pooler + classifier: the first position's state (N, T, D) -> (N, C).
class ClassesHead : public Module {
 public:
  ClassesHead(const BertConfig& c, init::SeedSequence& seeds) {
    dense_ = register_module("dense", std::make_shared<Linear>(c.hidden, c.hidden, true, seeds.next()));
    act_ = register_module("activation", std::make_shared<Activation>("tanh"));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor first = ops::reshape(ops::narrow(x, 1, 0, 1), Shape{x.dim(0), x.dim(2)});  // (N, D)
    return (*act_)((*dense_)(first));
  }

 private:
  std::shared_ptr<Linear> dense_;
  std::shared_ptr<Activation> act_;
};

// mlm: dense, GELU, LayerNorm, then the tied decoder: (N, T, D) -> (N, T, V).
class TokensHead : public Module {
 public:
  TokensHead(const BertConfig& c, init::SeedSequence& seeds, Tensor word_weight) : word_weight_(std::move(word_weight)) {
    dense_ = register_module("dense", std::make_shared<Linear>(c.hidden, c.hidden, true, seeds.next()));
    act_ = register_module("activation", std::make_shared<Activation>("gelu"));
    norm_ = register_module("norm", std::make_shared<LayerNorm>(c.hidden, kLayerNormEps));
    TagScope tag(MemTag::Parameter);
    bias_ = register_parameter("bias", Tensor::zeros({c.vocab}));
  }
  Tensor forward(const Tensor& x) override {
    return ops::linear((*norm_)((*act_)((*dense_)(x))), word_weight_, bias_);
  }

 private:
  std::shared_ptr<Linear> dense_;
  std::shared_ptr<Activation> act_;
  std::shared_ptr<LayerNorm> norm_;
  Tensor word_weight_;  // (V, D), embeddings.word_embeddings.weight (not registered again)
  Tensor bias_;         // (V)
};

}  // namespace

BertConfig bert_preset(const std::string& name) {
  BertConfig c;
  if (name == "bert_tiny") {
    c.layers = 2, c.heads = 2, c.hidden = 128;
  } else if (name == "bert_small") {
    c.layers = 4, c.heads = 8, c.hidden = 512;
  } else if (name == "bert_base") {
    c.layers = 12, c.heads = 12, c.hidden = 768;
  } else if (name == "bert_large") {
    c.layers = 24, c.heads = 16, c.hidden = 1024;
  } else {
    fail("model: unknown BERT preset '{}' (known: bert_tiny, bert_small, bert_base, bert_large)", name);
  }
  c.intermediate = 4 * c.hidden;
  return c;
}

Bert::Bert(const BertConfig& c) : c_(c) {
  PACKRAT_CHECK(c.vocab > 0 && c.max_positions > 0 && c.layers > 0 && c.heads > 0 && c.hidden > 0 &&
                    c.intermediate > 0 && c.type_vocab > 0,
                "bert: vocab {}, max_positions {}, layers {}, heads {}, hidden {}, intermediate {} must all be positive",
                c.vocab, c.max_positions, c.layers, c.heads, c.hidden, c.intermediate);
  PACKRAT_CHECK(c.hidden % c.heads == 0, "bert: hidden {} is not divisible by heads {}", c.hidden, c.heads);
  PACKRAT_CHECK(c.dropout >= 0.0f && c.dropout < 1.0f && c.attention_dropout >= 0.0f && c.attention_dropout < 1.0f,
                "bert: dropout {} and attention_dropout {} must be in [0, 1)", c.dropout, c.attention_dropout);
  PACKRAT_CHECK(c.head == "classes" || c.head == "tokens", "bert: unknown head '{}' (classes, tokens)", c.head);
  PACKRAT_CHECK(c.head != "classes" || c.num_classes > 0, "bert: {} classes", c.num_classes);
  init::SeedSequence seeds(c.seed);
  auto embeddings = std::make_shared<BertEmbeddings>(c, seeds);
  embeddings_ = register_module("embeddings", embeddings);
  encoder_ = register_module("encoder", std::make_shared<BertEncoder>(c, seeds));
  if (c.head == "classes") {  // BERT's names: pooler.dense, then dropout and classifier
    pooler_ = register_module("pooler", std::make_shared<ClassesHead>(c, seeds));
    head_dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
    head_ = register_module("classifier", std::make_shared<Linear>(c.hidden, c.num_classes, true, seeds.next()));
  } else {
    head_ = register_module("mlm", std::make_shared<TokensHead>(c, seeds, embeddings->word_weight()));
  }
  // BERT's init, drawn from one stream per parameter: N(0, 0.02) weights, zero biases, LayerNorms 1, 0.
  TagScope tag(MemTag::Parameter);
  uint64_t stream = 0;
  for (auto& [name, p] : named_parameters()) {
    PhiloxStream rng(c.seed, 0xbe27ull << 32 | stream++);
    if (name.find("norm") != std::string::npos) continue;  // LayerNorm: 1 and 0
    if (p.rank() == 1) init::constant(p, 0.0f);
    else init::normal(p, 0.0f, 0.02f, rng);
  }
}

Tensor Bert::forward(const Tensor& tokens) {
  PACKRAT_CHECK(tokens.defined() && tokens.rank() == 2 && tokens.dtype() == DType::i64,
                "bert: expects tokens (N, T) i64, got {}",
                tokens.defined() ? tokens.describe() : std::string("an undefined tensor"));
  const int64_t t = tokens.dim(1);
  PACKRAT_CHECK(t <= c_.max_positions,
                "bert: the input has {} tokens per sequence, more than the position table "
                "embeddings.position_embeddings holds ({}): set data.seq_len to at most {}",
                t, c_.max_positions, c_.max_positions);
  Tensor lengths;  // (N) i64: keys before each row's first pad token
  {
    TagScope tag(MemTag::Data);
    lengths = backend_of(tokens).sequence_lengths(tokens, data::kPadToken);
  }
  auto& encoder = static_cast<BertEncoder&>(*encoder_);
  encoder.set_key_lengths(lengths);
  const Tensor x = encoder((*embeddings_)(tokens));  // (N, T, D)
  if (pooler_) return (*head_)((*head_dropout_)((*pooler_)(x)));  // (N, C)
  return (*head_)(x);                                              // (N, T, V)
}

}  // namespace packrat
