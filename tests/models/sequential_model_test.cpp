// models/sequential_spec.h and models/sequential_model.h: a layer's text read and written back,
// its malformed forms refused with the text and the argument; the model of a list named as
// nn.Sequential names it (a residual's body under `body`), and each list that does not fit its
// input refused naming the layer's index, the nested path and both shapes.
#include "models/sequential_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/error.h"
#include "layers/activation.h"
#include "models/registry.h"
#include "models/sequential_spec.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A list of layer texts, a residual written as {"residual", {...}} through residual_layer.
std::vector<LayerSpec> layers(const std::vector<std::string>& texts) {
  std::vector<LayerSpec> out;
  for (const auto& t : texts) out.push_back(parse_layer(t));
  return out;
}

ModelSpec spec_of(std::vector<LayerSpec> l, int64_t classes = 10, int64_t channels = 1, int64_t side = 8) {
  ModelSpec s;
  s.arch = "sequential";
  s.in_channels = channels;
  s.image_size = side;
  s.num_classes = classes;
  s.layers = std::move(l);
  return s;
}

std::vector<std::string> names(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

}  // namespace

TEST(SequentialLayers, TextIsReadAndWrittenBackCanonically) {
  const LayerSpec conv = parse_layer(" conv2d(32, 3, padding=1) ");
  EXPECT_EQ(conv.name, "conv2d");
  EXPECT_EQ(conv.arg("out_channels"), 32);
  EXPECT_EQ(conv.arg("kernel"), 3);
  EXPECT_EQ(conv.arg("stride"), 1);
  EXPECT_EQ(conv.arg("padding"), 1);
  EXPECT_EQ(conv.arg("bias"), 1);
  for (const auto& [written, canonical] : std::vector<std::pair<std::string, std::string>>{
           {"conv2d(32, 3, padding=1)", "conv2d(32, 3, padding=1)"},
           {"conv2d(32,3,1,1,bias=False)", "conv2d(32, 3, padding=1, bias=false)"},
           {"conv2d(out_channels=16, kernel=5, stride=2)", "conv2d(16, 5, stride=2)"},
           {"batchnorm2d", "batchnorm2d"},
           {"batchnorm2d()", "batchnorm2d"},
           {"batchnorm2d(eps=1e-3, momentum=0.01)", "batchnorm2d(eps=0.001, momentum=0.01)"},
           {"linear(10)", "linear(10)"},
           {"linear(10, bias=false)", "linear(10, bias=false)"},
           {"maxpool2d(2)", "maxpool2d(2)"},
           {"maxpool2d(3, 2, 1)", "maxpool2d(3, stride=2, padding=1)"},
           {"avgpool2d(2, stride=2)", "avgpool2d(2, stride=2)"},
           {"adaptive_avgpool2d(1)", "adaptive_avgpool2d(1)"},
           {"dropout", "dropout"},
           {"dropout(0.1)", "dropout(0.1)"},
           {"dropout(p=0.25)", "dropout(0.25)"},
           {"layernorm(eps=1e-6)", "layernorm(eps=1e-06)"},
           {"gelu", "gelu"},
           {"gelu_tanh", "gelu_tanh"},
           {"flatten", "flatten"}}) {
    const LayerSpec l = parse_layer(written);
    EXPECT_EQ(layer_text(l), canonical) << written;
    EXPECT_EQ(parse_layer(layer_text(l)), l) << written;
  }
  // Every activation packrat has, by name.
  for (const char* a : {"relu", "leaky_relu", "relu6", "hardswish", "gelu", "silu", "sigmoid", "tanh", "selu",
                        "softplus", "elu", "mish", "gelu_tanh"})
    EXPECT_EQ(parse_layer(a).name, a);
}

TEST(SequentialLayers, MalformedTextIsRefusedNamingWhatIsWrong) {
  const std::string unknown = message_of([] { parse_layer("conv(32, 3)"); });
  EXPECT_TRUE(has(unknown, "conv(32, 3): unknown layer 'conv' (known: conv2d, batchnorm2d, linear")) << unknown;
  EXPECT_TRUE(has(unknown, "gelu")) << unknown;
  EXPECT_TRUE(has(unknown, "residual)")) << unknown;
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"conv2d(32)", "conv2d(32): kernel is missing; it takes conv2d(out_channels, kernel, stride=1, padding=0"},
           {"conv2d(32, 3, pad=1)", "unknown argument 'pad'"},
           {"conv2d(32, x)", "conv2d(32, x): kernel must be an integer from 1 to 1024, got 'x'"},
           {"conv2d(32, 3.5)", "kernel must be an integer"},
           {"conv2d(0, 3)", "out_channels must be an integer from 1 to 65536, got 0"},
           {"conv2d(32, 3", "no closing parenthesis"},
           {"conv2d(32, (3))", "unbalanced parentheses"},
           {"conv2d(padding=1, 32, 3)", "'32' by position after a key=value argument"},
           {"conv2d(32, 3, stride=1, stride=2)", "stride is given twice"},
           {"conv2d(32, , 3)", "argument 2 is empty"},
           {"linear(10, bias=maybe)", "bias must be true or false, got 'maybe'"},
           {"dropout(1.5)", "p must be a number from 0 to 0.999, got 1.5"},
           {"relu(2)", "1 argument(s), but relu takes 0: relu (no arguments)"},
           {"maxpool2d(2, stride=0)", "stride must be an integer from 1 to 1024, got 0"},
           {"conv2d 32", "is not a layer"},
           {"", "an empty layer"},
           {"residual", "a residual is a mapping with its layers"}}) {
    const std::string m = message_of([&] { parse_layer(text); });
    EXPECT_TRUE(has(m, says)) << text << ": " << m;
  }
}

TEST(SequentialLayers, NamesAreNnSequentials) {
  std::vector<LayerSpec> l = layers({"conv2d(4, 3, padding=1)", "batchnorm2d", "relu", "maxpool2d(2)"});
  std::vector<LayerSpec> inner = layers({"conv2d(4, 3, padding=1, bias=false)", "batchnorm2d"});
  inner.push_back(residual_layer(layers({"conv2d(4, 1)"})));  // nested: 4.body.2.body.0
  l.push_back(residual_layer(inner));
  for (const auto& t : {"adaptive_avgpool2d(1)", "flatten", "dropout(0.1)", "linear(10)"}) l.push_back(parse_layer(t));
  const auto m = make_model(spec_of(l));
  EXPECT_EQ(names(*m), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "4.body.0.weight",
                                                 "4.body.1.weight", "4.body.1.bias", "4.body.2.body.0.weight",
                                                 "4.body.2.body.0.bias", "8.weight", "8.bias"}));
  std::vector<std::string> buffers;
  for (const auto& [n, t] : m->named_buffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked",
                                               "4.body.1.running_mean", "4.body.1.running_var",
                                               "4.body.1.num_batches_tracked"}));
  // The residual is a block (memory.recompute: [blocks]) and computes x + body(x).
  bool block = false;
  for (auto& [n, mod] : m->named_modules()) block = block || (n == "4" && mod->is_block());
  EXPECT_TRUE(block);
  NoGradScope no_grad;
  m->eval();
  const Tensor y = (*m)(Tensor::full(Shape{2, 1, 8, 8}, 1.0f));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  // Same seed, same weights; another seed, others.
  const auto again = make_model(spec_of(l));
  EXPECT_EQ(again->named_parameters()[0].second.to_vector(), m->named_parameters()[0].second.to_vector());
  ModelSpec other = spec_of(l);
  other.seed = 1;
  EXPECT_NE(make_model(other)->named_parameters()[0].second.to_vector(), m->named_parameters()[0].second.to_vector());
}

TEST(SequentialLayers, ResidualAddsItsInput) {
  auto body = std::make_shared<Sequential>();
  body->add(std::make_shared<Activation>("relu"));
  Residual r(body);
  const Tensor x = Tensor::from_vector(Shape{1, 4}, std::vector<float>{-1.0f, 0.5f, 2.0f, -3.0f});
  EXPECT_EQ(r(x).to_vector(), (std::vector<float>{-1.0f, 1.0f, 4.0f, -3.0f}));
}

TEST(SequentialLayers, ShapesThatDoNotChainAreRefusedNamingTheLayer) {
  struct Case {
    std::vector<LayerSpec> layers;
    std::string says;
  };
  auto res = [](const std::vector<std::string>& body) { return residual_layer(layers(body)); };
  std::vector<Case> cases = {
      {layers({"conv2d(4, 3)", "relu", "linear(10)"}),
       "model.layers[2]: linear(10) takes 2-d input (N, features), gets (N, 4, 6, 6): add flatten before it"},
      {layers({"flatten", "batchnorm2d", "linear(10)"}),
       "model.layers[1]: batchnorm2d takes 4-d input (N, C, H, W), gets (N, 64) (there is no batchnorm1d"},
      {layers({"flatten", "conv2d(4, 3)"}), "model.layers[1]: conv2d(4, 3) takes 4-d input (N, C, H, W), gets (N, 64)"},
      {layers({"conv2d(4, 9)"}),
       "model.layers[0]: conv2d(4, 9) does not fit its input (N, 1, 8, 8): the kernel spans 9"},
      {layers({"maxpool2d(16)"}), "model.layers[0]: maxpool2d(16) does not fit its input (N, 1, 8, 8)"},
      {layers({"avgpool2d(2, padding=2)"}), "model.layers[0]: avgpool2d(2, padding=2) has padding 2, more than half"},
      {layers({"conv2d(4, 3, groups=2)"}),
       "model.layers[0]: conv2d(4, 3, groups=2) has groups=2, which must divide its "
       "input's 1 channels"},
      {layers({"layernorm", "flatten", "linear(10)"}),
       "model.layers[0]: layernorm normalizes the features of 2-d input (N, features), gets (N, 1, 8, 8)"},
      {{parse_layer("conv2d(4, 3, padding=1)"), res({"conv2d(8, 3, padding=1)"})},
       "model.layers[1]: the residual's body changes the shape (N, 4, 8, 8) -> (N, 8, 8, 8), but x + body(x) needs"},
      {{parse_layer("conv2d(4, 3, padding=1)"), res({"relu", "flatten", "linear(10)"})},
       "model.layers[1]: the residual's body changes the shape (N, 4, 8, 8) -> (N, 10)"},
      {{parse_layer("flatten"), res({"relu", "conv2d(4, 3)"})},
       "model.layers[1].residual[1]: conv2d(4, 3) takes 4-d input (N, C, H, W), gets (N, 64)"},
      {{parse_layer("flatten"), residual_layer({parse_layer("relu"), res({"batchnorm2d"})})},
       "model.layers[1].residual[1].residual[0]: batchnorm2d takes 4-d input"},
      {{parse_layer("flatten"), residual_layer({})}, "model.layers[1]: residual has no layers"},
      // The output: one logit per class.
      {layers({"flatten", "linear(12)"}),
       "model.layers[1]: the model's output is (N, 12), but the loss takes (N, 10), one logit per class (the data's "
       "classes, or model.classes): change model.layers[1] linear(12) to linear(10)"},
      {layers({"flatten", "linear(12)", "relu"}), "change model.layers[1] linear(12) to linear(10)"},
      {layers({"conv2d(10, 8)"}),
       "model.layers[0]: the model's output is (N, 10, 1, 1), but the loss takes (N, 10), "
       "one logit per class (the data's classes, or model.classes): end the list with "
       "flatten and linear(10)"},
      {layers({"flatten"}),
       "(N, 64), but the loss takes (N, 10), one logit per class (the data's classes, or "
       "model.classes): end the list with linear(10)"},
      {{}, "model.layers: model.arch sequential needs its list of layers"},
  };
  for (const Case& c : cases) {
    const std::string m = message_of([&] { make_model(spec_of(c.layers)); });
    EXPECT_TRUE(has(m, c.says)) << m;
  }
  // A layer's `where` (the config's file, path and line) names it instead.
  std::vector<LayerSpec> l = layers({"relu", "linear(10)"});
  l[1].where = "m.yaml: model.layers[1] (line 9)";
  const std::string m = message_of([&] { make_model(spec_of(l)); });
  EXPECT_TRUE(has(m, "m.yaml: model.layers[1] (line 9): linear(10) takes 2-d input")) << m;
}

TEST(SequentialLayers, OnlySequentialReadsLayers) {
  ModelSpec s;
  s.arch = "resnet20";
  s.layers = layers({"relu"});
  const std::string m = message_of([&] { make_model(s); });
  EXPECT_TRUE(has(m, "model.layers: resnet20 has no list of layers (architectures with one: sequential)")) << m;
  EXPECT_EQ(model_keys("sequential"), (std::vector<std::string>{"classes", "in_channels", "image_size", "layers"}));
}
