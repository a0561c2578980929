// Checkpoints keep the counters that key dropout, stochastic-depth and attention-dropout masks
// (trainer.masks.*): a run resumed from a checkpoint draws the masks the uninterrupted run draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "autograd/tape.h"
#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/safetensors.h"
#include "layers/dropout.h"
#include "models/gpt.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
namespace fs = std::filesystem;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to_plain(), y = b.to_plain();
  return x.shape() == y.shape() && x.dtype() == y.dtype() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

struct MaskedModel {
  std::string name;
  std::function<std::shared_ptr<Module>()> make;
  Tensor input;
};

// efficientnet_b0_small at width 0.25: stochastic depth in its residual blocks, dropout before the classifier.
MaskedModel tiny_efficientnet() {
  Tensor x = Tensor::empty({4, 3, 16, 16});  // (N, C, H, W)
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  return {"efficientnet", [] { return make_model({"efficientnet_b0_small", "cifar", "", 3, 10, 3, 0, 0, 0.25, 1.0}); }, x};
}

// A one-block GPT with dropout 0.3: embedding, attention-probability and residual dropout.
MaskedModel tiny_gpt() {
  Tensor tokens = Tensor::empty({2, 6}, DType::i64);  // (N, T)
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data<int64_t>()[i] = (i * 5) % 16;
  GptConfig c;
  c.vocab = 16, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.dropout = 0.3f, c.seed = 3;
  return {"gpt", [c] { return std::make_shared<Gpt>(c); }, tokens};
}

class MaskResume : public ::testing::TestWithParam<MaskedModel (*)()> {};

TEST_P(MaskResume, ResumedRunDrawsTheUninterruptedRunsMasks) {
  const MaskedModel m = GetParam()();
  SCOPED_TRACE(m.name);
  set_dropout_seed(11);
  const fs::path dir = packrat::testing::temp_dir("mask_resume_" + m.name);
  const std::string path = checkpoint_path(dir.string(), 1);
  NoGradScope no_grad;  // forwards only: the masks are what is compared

  // The uninterrupted run: three training forwards, a checkpoint, a fourth forward.
  auto a = m.make();
  SGD opt_a(a->named_parameters(), SgdOptions{0.1, 0.9});
  Tensor third;
  for (int k = 0; k < 3; ++k) third = (*a)(m.input);
  save_checkpoint(path, *a, opt_a, {1, 3, 11}, m.name);
  const Tensor fourth = (*a)(m.input);
  ASSERT_FALSE(same_bytes(third, fourth)) << "the masks change from call to call (else this test proves nothing)";

  // The resumed run: a new model (its modules get other process-wide indices, no calls yet).
  auto b = m.make();
  SGD opt_b(b->named_parameters(), SgdOptions{0.1, 0.9});
  const auto fresh = b->named_mask_streams();
  ASSERT_FALSE(fresh.empty());
  EXPECT_EQ(fresh[0].second->calls, 0u);
  EXPECT_NE(fresh[0].second->index, a->named_mask_streams()[0].second->index);
  load_checkpoint(path, *b, opt_b);
  const Tensor resumed = (*b)(m.input);
  EXPECT_TRUE(same_bytes(resumed, fourth)) << "the resumed forward's masks differ from the uninterrupted run's";
  const auto sa = a->named_mask_streams(), sb = b->named_mask_streams();
  ASSERT_EQ(sa.size(), sb.size());
  size_t counting = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second->index, sb[i].second->index) << sa[i].first;
    EXPECT_EQ(sa[i].second->calls, sb[i].second->calls) << sa[i].first;
    // Every training forward counts; a drop path with p = 0 or on a block without a residual draws nothing.
    EXPECT_TRUE(sa[i].second->calls == 4u || sa[i].second->calls == 0u) << sa[i].first << ": " << sa[i].second->calls;
    counting += sa[i].second->calls == 4u;
  }
  EXPECT_GE(counting, 3u) << "dropout and at least two drop paths (or the GPT's dropouts) drew masks";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, MaskResume, ::testing::Values(&tiny_efficientnet, &tiny_gpt));

TEST(MaskResume, StreamsAreNamedAfterTheirModules) {
  const MaskedModel e = tiny_efficientnet(), g = tiny_gpt();
  std::vector<std::string> names;
  for (const auto& [n, s] : e.make()->named_mask_streams()) names.push_back(n);
  for (const auto& [n, s] : g.make()->named_mask_streams()) names.push_back(n);
  std::string all;
  for (const auto& n : names) all += " " + n;
  for (const char* want : {"features.4.1.stochastic_depth", "classifier.0", "transformer.drop",
                           "transformer.h.0.attn.attn_dropout", "transformer.h.0.resid_dropout",
                           "transformer.h.0.mlp.dropout"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << " is not among" << all;
}

TEST(MaskResume, AMissingOrForeignStreamIsAnErrorNamingIt) {
  const MaskedModel m = tiny_gpt();
  const fs::path dir = packrat::testing::temp_dir("mask_resume_bad");
  const std::string path = checkpoint_path(dir.string(), 1);
  auto a = m.make();
  SGD opt(a->named_parameters(), SgdOptions{0.1, 0.9});
  save_checkpoint(path, *a, opt, {1, 0, 0}, "gpt");
  const SafetensorsFile f = read_safetensors(path);
  auto rewrite = [&](const std::string& drop, const std::string& add) {
    NamedTensors kept;
    for (const auto& [n, t] : f.tensors)
      if (n != drop) kept.emplace_back(n, t);
    if (!add.empty()) kept.emplace_back(add, *f.find("trainer.masks.transformer.drop"));
    write_safetensors(path, kept, f.metadata);
  };
  auto expect_error = [&](const std::string& needle) {
    try {
      load_checkpoint(path, *a, opt);
      ADD_FAILURE() << "no error; expected one naming " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rewrite("trainer.masks.transformer.h.0.attn.attn_dropout", "");
  expect_error("'trainer.masks.transformer.h.0.attn.attn_dropout'");
  rewrite("", "trainer.masks.transformer.h.7.dropout");
  expect_error("'trainer.masks.transformer.h.7.dropout' is not a mask stream of this model");
  fs::remove_all(dir);
}

}  // namespace
