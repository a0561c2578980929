// models/bert: PyTorch goldens (tests/golden/make_bert_golden.py: nn.TransformerEncoder with
// BERT's embeddings and heads, weights through safetensors, names loaded strictly) of forward +
// backward in train mode and of eval, post-LN with the classes head and padded sequences, pre-LN
// with the tied masked-language-model head, with both attention algorithms; a gradient check; the
// presets' sizes; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/philox.h"
#include "experiments/lib/safetensors.h"
#include "layers/init.h"
#include "models/bert.h"
#include "models/registry.h"
#include "tests/models/golden_file.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::expect_close;
using packrat::testing::message_of;

namespace {

BertConfig golden_config(const std::string& head, bool norm_first) {  // as make_bert_golden.py
  BertConfig c;
  c.vocab = 256, c.max_positions = 12, c.hidden = 16, c.heads = 2, c.intermediate = 32, c.layers = 2;
  c.num_classes = 5;
  c.head = head;
  c.norm_first = norm_first;
  c.dropout = c.attention_dropout = 0.0f;
  return c;
}


struct GoldenCase {
  std::string file, head;
  bool norm_first;
};
void PrintTo(const GoldenCase& g, std::ostream* os) { *os << g.file; }

class BertGolden : public ::testing::TestWithParam<std::tuple<GoldenCase, std::string>> {};

TEST_P(BertGolden, ForwardBackwardAndEvalMatchPyTorch) {
  const auto& [g, attention] = GetParam();
  const SafetensorsFile f = read_safetensors(std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/models/" + g.file);
  BertConfig c = golden_config(g.head, g.norm_first);
  c.attention = attention;
  Bert model(c);
  packrat::testing::load_golden_parameters(model, f);  // names one for one with PyTorch's
  if (::testing::Test::HasFatalFailure()) return;

  const Tensor tokens = *f.find("tokens"), targets = *f.find("targets");
  model.train();
  const Tensor logits = model(tokens);
  const int64_t classes = logits.dim(-1);
  const Tensor loss = ops::cross_entropy(ops::reshape(logits, Shape{logits.numel() / classes, classes}),
                                         ops::reshape(targets, Shape{targets.numel()}));
  expect_close(logits, *f.find("logits.train"), 1e-4f, 1e-4f, "logits (train)");
  expect_close(loss, *f.find("loss.train"), 1e-5f, 1e-5f, "loss");
  backward(loss);
  for (auto& [name, p] : model.named_parameters())
    expect_close(p.grad(), *f.find("grad." + name), 1e-4f, 1e-3f, "grad " + name);
  model.zero_grad();

  model.eval();
  NoGradScope no_grad;
  expect_close(model(tokens), *f.find("logits.eval"), 1e-4f, 1e-4f, "logits (eval)");
}

INSTANTIATE_TEST_SUITE_P(
    PostLnClassesAndPreLnTokens, BertGolden,
    ::testing::Combine(::testing::Values(GoldenCase{"bert_golden_post_ln_classes.safetensors", "classes", false},
                                         GoldenCase{"bert_golden_pre_ln_tokens.safetensors", "tokens", true}),
                       ::testing::Values("standard", "memory_efficient")),
    [](const auto& info) {
      return std::get<0>(info.param).head + "_" + std::get<1>(info.param);
    });

TEST(Bert, GradientCheckWithPaddingOnATinyModel) {
  BertConfig c = golden_config("classes", false);
  c.vocab = 9, c.hidden = 4, c.intermediate = 8, c.layers = 1, c.max_positions = 5, c.num_classes = 3;
  c.attention = "memory_efficient";
  c.seed = 3;
  Bert model(c);
  PhiloxStream rng(9, 1);  // larger weights than BERT's 0.02, so every branch moves the output
  for (auto& [name, p] : model.named_parameters())
    if (p.rank() == 2) init::normal(p, 0.0f, 0.5f, rng);
  Tensor tokens = Tensor::empty(Shape{2, 5}, DType::i64);  // (N, T); row 1 padded after 3 tokens
  const int64_t ids[] = {1, 4, 3, 6, 2, 1, 5, 8, 0, 0};
  std::copy(std::begin(ids), std::end(ids), tokens.data<int64_t>());
  packrat::testing::GradcheckOptions o;
  o.max_elements = 6;
  o.eps = 1e-3;
  o.atol = 3e-3, o.rtol = 3e-2;
  packrat::testing::gradcheck([&](const std::vector<Tensor>&) { return model(tokens); }, model.parameters(), o);
}

// Padding is derived from the tokens: what follows a row's first pad token changes nothing of the
// classes head's output.
TEST(Bert, TokensAfterThePadChangeNothing) {
  BertConfig c = golden_config("classes", false);
  Bert model(c);
  model.eval();
  NoGradScope no_grad;
  Tensor a = Tensor::empty(Shape{1, 8}, DType::i64), b = Tensor::empty(Shape{1, 8}, DType::i64);
  const int64_t ia[] = {1, 70, 71, 72, 0, 0, 0, 0}, ib[] = {1, 70, 71, 72, 0, 99, 3, 0};
  std::copy(std::begin(ia), std::end(ia), a.data<int64_t>());
  std::copy(std::begin(ib), std::end(ib), b.data<int64_t>());
  EXPECT_EQ(model(a).to_vector(), model(b).to_vector());
}

TEST(Bert, PresetsHaveBertsSizes) {
  // Encoder layer: 4 D^2 + 4 D (attention) + 2 D I + I + D (feed-forward) + 4 D (norms).
  auto layer = [](int64_t d) { return 4 * d * d + 4 * d + 2 * d * 4 * d + 4 * d + d + 4 * d; };
  // The last two: model.width_mult scales the heads (64 wide each), depth_mult the layers.
  for (const auto& [arch, layers, d, width, depth] : std::vector<std::tuple<std::string, int64_t, int64_t, double, double>>{
           {"bert_tiny", 2, 128, 1, 1},
           {"bert_small", 4, 512, 1, 1},
           {"bert_base", 12, 768, 1, 1},
           {"bert_large", 24, 128, 0.125, 1},
           {"bert_small", 3, 256, 0.5, 0.6}}) {
    ModelSpec s;
    s.arch = arch;
    s.num_classes = 2;
    s.width_mult = width;
    s.depth_mult = depth;
    auto m = make_model(s);
    const int64_t embeddings = (256 + 512 + 2) * d + 2 * d, head = d * d + d + 2 * d + 2;
    EXPECT_EQ(m->num_parameters(), embeddings + layers * layer(d) + head) << arch;
    std::set<std::string> names;
    for (auto& [n, p] : m->named_parameters()) names.insert(n);
    EXPECT_TRUE(names.count("encoder.layers." + std::to_string(layers - 1) + ".self_attn.in_proj_weight")) << arch;
    EXPECT_TRUE(names.count("encoder.layers.0.linear2.bias")) << arch;
    EXPECT_TRUE(names.count("classifier.weight")) << arch;
  }
}

TEST(Bert, ErrorsNameTheKey) {
  Bert model(bert_preset("bert_tiny"));  // 512 positions
  const std::string m = message_of([&] { model(Tensor::zeros(Shape{1, 513}, DType::i64)); });
  EXPECT_NE(m.find("data.seq_len"), std::string::npos) << m;
  EXPECT_NE(m.find("embeddings.position_embeddings"), std::string::npos) << m;
  clear_tape();
  ModelSpec s;
  s.arch = "bert_tiny";
  s.attention = "flash";
  EXPECT_NE(message_of([&] { make_model(s); }).find("model.attention: unknown algorithm 'flash'"), std::string::npos);
  s.attention = "";
  s.width_mult = 0.25;  // half a head
  const std::string heads = message_of([&] { make_model(s); });
  EXPECT_NE(heads.find("model.width_mult 0.25 gives 0.5 attention heads"), std::string::npos) << heads;
}

}  // namespace
