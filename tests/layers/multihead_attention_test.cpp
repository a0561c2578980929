// MultiheadAttention against PyTorch's nn.MultiheadAttention (tests/golden/transformer/mha.txt),
// plain and causal, in train and eval mode; parameter names and shapes as PyTorch's state_dict.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/tape.h"
#include "layers/multihead_attention.h"
#include "tests/autograd/elementwise_golden.h"

using namespace packrat;
using packrat::testing::expect_close;
using packrat::testing::load_golden;

namespace {

void load_weights(Module& m, const std::map<std::string, packrat::testing::GoldenTensor>& g) {
  for (auto& [name, t] : m.named_parameters()) {
    const auto& want = g.at(name);
    ASSERT_EQ(t.shape(), want.shape) << name;
    Tensor src = want.f32();
    std::memcpy(t.data<float>(), src.data<float>(), static_cast<size_t>(t.nbytes()));
  }
}

}  // namespace

TEST(MultiheadAttentionLayer, ParameterNamesAndShapesAreNnMultiheadAttentions) {
  MultiheadAttention m({8, 2, 0.0f, false, 1});
  const auto params = m.named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].first, "in_proj_weight");
  EXPECT_EQ(params[0].second.shape(), Shape({24, 8}));
  EXPECT_EQ(params[1].first, "in_proj_bias");
  EXPECT_EQ(params[2].first, "out_proj.weight");
  EXPECT_EQ(params[2].second.shape(), Shape({8, 8}));
  EXPECT_EQ(params[3].first, "out_proj.bias");
  EXPECT_EQ(m.in_proj_bias().to_vector(), std::vector<float>(24, 0.0f));
}

TEST(MultiheadAttentionLayer, MatchesPyTorchTrainAndEvalPlainAndCausal) {
  const auto g = load_golden("mha.txt", "transformer");
  for (const char* mode : {"train", "eval"})
    for (bool causal : {false, true}) {
      const std::string tag = std::string(mode) + (causal ? ".causal" : ".full");
      SCOPED_TRACE(tag);
      MultiheadAttention m({8, 2, 0.0f, causal, 1});
      load_weights(m, g);
      m.train(std::string(mode) == "train");
      Tensor x = g.at("x").f32().set_requires_grad(true);
      Tensor y = m(x);
      expect_close(y, g.at(tag + ".y"), 1e-5, 1e-4, "y");
      backward(y, g.at("gy").f32());
      expect_close(x.grad(), g.at(tag + ".gx"), 1e-5, 1e-4, "gx");
      for (auto& [name, p] : m.named_parameters()) expect_close(p.grad(), g.at(tag + ".grad." + name), 1e-5, 1e-4, name);
    }
}

TEST(MultiheadAttentionLayer, SavesEveryTensorUnderItsLayerName) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  auto m = std::make_shared<MultiheadAttention>(MultiheadAttentionOptions{8, 2, 0.1f, true, 1});
  Tensor x = Tensor::zeros({2, 5, 8}).set_requires_grad(true);
  LayerScope outer("encoder.layers.encoder_layer_0");
  Tensor y = (*m)(x);
  std::vector<std::string> seen;
  for (const auto& r : policy.describe()) seen.push_back(r.op + "@" + r.layer);
  // in_proj's input, q k v softmax mask, out_proj's input (parameters are not listed)
  std::string all;
  for (const auto& s : seen) all += s + " ";
  EXPECT_EQ(seen.size(), 7u) << all;
  for (const auto& s : seen) EXPECT_NE(s.find("@encoder.layers.encoder_layer_0"), std::string::npos) << s;
  EXPECT_NE(std::find(seen.begin(), seen.end(), "attention_dropout@encoder.layers.encoder_layer_0"), seen.end());
  backward(y, Tensor::full(y.shape(), 1.0f));
  EXPECT_EQ(policy.describe().size(), 0u);
}
