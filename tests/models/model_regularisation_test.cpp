// model.dropout, model.attention_dropout and model.stochastic_depth reach the models that have
// them (two training-mode forwards of one input differ only where something is dropped), keep the
// preset's own when unset, and are errors naming the key on a model without them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/backend.h"
#include "core/philox.h"
#include "experiments/lib/config.h"
#include "models/registry.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

Tensor images(int64_t n, int64_t c, int64_t side) {
  PhiloxStream s(3, 1);
  std::vector<float> v(static_cast<size_t>(n * c * side * side));
  for (float& x : v) x = s.uniform();
  return Tensor::from_vector(Shape{n, c, side, side}, v);
}

// Whether two training-mode forwards of x give different outputs (something was dropped).
bool forwards_differ(const ModelSpec& spec, const Tensor& x) {
  auto m = make_model(spec);
  m->train();
  for (auto& [name, p] : m->named_parameters())  // ViT's head starts at zero, as torchvision's
    if (name == "heads.head.weight") backend_of(p).fill(p, 0.01);
  NoGradScope no_grad;
  return (*m)(x).to_vector() != (*m)(x).to_vector();
}

ModelSpec spec(const std::string& arch, int64_t channels) {
  ModelSpec s;
  s.arch = arch;
  s.in_channels = channels;
  s.num_classes = 10;
  return s;
}

TEST(ModelRegularisation, DropoutReachesTheVisionTransformer) {
  const Tensor x = images(2, 1, 28);
  ModelSpec s = spec("vit_tiny_fmnist", 1);
  EXPECT_FALSE(forwards_differ(s, x)) << "the preset has no dropout";
  s.dropout = 0.3;
  EXPECT_TRUE(forwards_differ(s, x));
  s.dropout = -1;
  s.attention_dropout = 0.3;
  EXPECT_TRUE(forwards_differ(s, x));
}

TEST(ModelRegularisation, DropoutAndStochasticDepthReachEfficientNet) {
  const Tensor x = images(4, 1, 28);
  ModelSpec s = spec("efficientnet_b0_small", 1);
  EXPECT_TRUE(forwards_differ(s, x)) << "the preset's own: dropout 0.2, stochastic depth 0.2";
  s.dropout = 0;
  s.stochastic_depth = 0;
  EXPECT_FALSE(forwards_differ(s, x));
  s.stochastic_depth = 0.5;
  EXPECT_TRUE(forwards_differ(s, x));
}

TEST(ModelRegularisation, AModelWithoutTheRegulariserNamesTheKey) {
  ModelSpec s = spec("resnet20", 1);
  s.dropout = 0.1;
  const std::string m = testing::message_of([&] { make_model(s); });
  EXPECT_EQ(m.rfind("model.dropout: resnet20 has no dropout (architectures with one: bert_base, bert_large, bert_small, bert_tiny, efficientnet_b0, ", 0), 0u) << m;
  EXPECT_NE(m.find("gpt_tiny"), std::string::npos) << m;
  EXPECT_NE(m.find("vit_tiny_fmnist)"), std::string::npos) << m;
  s = spec("gpt_tiny", 1);
  s.attention_dropout = 0.1;
  EXPECT_NE(testing::message_of([&] { make_model(s); }).find("model.attention_dropout: gpt_tiny"), std::string::npos);
  s = spec("vit_tiny_fmnist", 1);
  s.stochastic_depth = 0.1;
  EXPECT_NE(testing::message_of([&] { make_model(s); }).find("model.stochastic_depth: vit_tiny_fmnist"), std::string::npos);
}

TEST(ModelRegularisation, TheKeysAreParsedRangeCheckedAndWrittenOnlyWhenSet) {
  const std::string base = "data: {dataset: fashion_mnist}\nmodel:\n  arch: vit_tiny_fmnist\n";
  const Config c = parse_config(base + "  dropout: 0.1\n  attention_dropout: 0.2\n", "r.yaml");
  EXPECT_EQ(c.model.dropout, 0.1);
  EXPECT_EQ(c.model.attention_dropout, 0.2);
  EXPECT_EQ(c.model.stochastic_depth, -1);
  const std::string yaml = config_to_yaml(c);
  EXPECT_NE(yaml.find("dropout: 0.1"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("stochastic_depth"), std::string::npos) << yaml;
  EXPECT_EQ(parse_config(yaml, "round trip").model.attention_dropout, 0.2);
  const std::string m = testing::message_of([&] { parse_config(base + "  dropout: 1.5\n", "r.yaml"); });
  EXPECT_NE(m.find("model.dropout (line 4)"), std::string::npos) << m;
}

}  // namespace
}  // namespace packrat
