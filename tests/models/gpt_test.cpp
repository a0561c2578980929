// models/gpt: a PyTorch golden of forward + backward (train, dropout 0) and eval of a tiny GPT
// (tests/golden/make_gpt_golden.py, weights through safetensors), a gradient check, the tied
// head, errors, and what it saves under every scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "autograd/tape.h"
#include "core/philox.h"
#include "layers/init.h"
#include "experiments/lib/config.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "models/gpt.h"
#include "models/registry.h"
#include "tests/models/golden_file.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::expect_close;
using packrat::testing::message_of;

namespace {

GptConfig golden_config() {  // as VOCAB, BLOCK, LAYERS, HEADS, EMBD in make_gpt_golden.py
  GptConfig c;
  c.vocab = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.dropout = 0.0f;
  return c;
}


}  // namespace

TEST(Gpt, ForwardBackwardAndEvalMatchPyTorch) {
  const SafetensorsFile f =
      read_safetensors(std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/models/gpt_tiny_golden.safetensors");
  Gpt model(golden_config());
  packrat::testing::load_golden_parameters(model, f);  // names one for one with PyTorch's
  if (::testing::Test::HasFatalFailure()) return;

  const Tensor tokens = *f.find("tokens"), targets = *f.find("targets");
  model.train();
  Tensor logits = model(tokens);
  Tensor loss = task_loss(logits, targets, 0.0f);
  expect_close(logits, *f.find("logits.train"), 1e-4f, 1e-4f, "logits (train)");
  expect_close(loss, *f.find("loss.train"), 1e-5f, 1e-5f, "loss");
  backward(loss);
  for (auto& [name, p] : model.named_parameters())  // wte's gradient sums the embedding's and the head's
    expect_close(p.grad(), *f.find("grad." + name), 1e-4f, 1e-3f, "grad " + name);
  model.zero_grad();

  model.eval();
  NoGradScope no_grad;
  expect_close(model(tokens), *f.find("logits.eval"), 1e-4f, 1e-4f, "logits (eval)");
}

TEST(Gpt, GradientCheckOnATinyModel) {
  GptConfig c = golden_config();
  c.vocab = 7, c.n_embd = 4, c.n_layer = 1, c.block_size = 5;
  c.seed = 3;
  Gpt model(c);
  // Larger weights than nanoGPT's 0.02, so every branch moves the output measurably.
  PhiloxStream rng(9, 1);
  for (auto& [name, p] : model.named_parameters())
    if (p.rank() == 2) init::normal(p, 0.0f, 0.5f, rng);
  Tensor tokens = Tensor::empty(Shape{2, 5}, DType::i64);  // (N, T)
  const int64_t ids[] = {1, 4, 0, 6, 2, 3, 3, 5, 1, 0};
  std::copy(std::begin(ids), std::end(ids), tokens.data<int64_t>());
  std::vector<Tensor> params = model.parameters();
  packrat::testing::GradcheckOptions o;
  o.max_elements = 6;
  o.eps = 1e-3;
  o.atol = 3e-3, o.rtol = 3e-2;
  packrat::testing::gradcheck([&](const std::vector<Tensor>&) { return model(tokens); }, params, o);
}

TEST(Gpt, TiedHeadIsOneParameter) {
  Gpt model(gpt_preset("gpt_tiny"));
  int64_t wte = 0;
  for (auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(name.rfind("lm_head", 0), std::string::npos) << name;
    wte += name == "transformer.wte.weight";
  }
  EXPECT_EQ(wte, 1);
  // 2 layers of D = 64: 12 D^2 + 13 D each, embeddings (256 + 128) D, ln_f 2D.
  const int64_t d = 64;
  EXPECT_EQ(model.num_parameters(), 2 * (12 * d * d + 13 * d) + (256 + 128) * d + 2 * d);
}

TEST(Gpt, ErrorsNameTheKey) {
  Gpt model(gpt_preset("gpt_tiny"));  // block_size 128
  const Tensor tokens = Tensor::zeros(Shape{1, 129}, DType::i64);
  const std::string m = message_of([&] { model(tokens); });
  EXPECT_NE(m.find("data.seq_len"), std::string::npos) << m;
  EXPECT_NE(m.find("block_size 128"), std::string::npos) << m;
  clear_tape();
  ModelSpec s;
  s.arch = "gpt_huge";
  EXPECT_NE(message_of([&] { make_model(s); }).find("gpt_tiny"), std::string::npos);
}
