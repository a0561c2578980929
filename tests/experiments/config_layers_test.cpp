// model.layers in the config (experiments/lib/config_layers.h): read in block and flow style (a
// flow list's layers split at their commas by YAML are joined again), written back by the
// resolved-config writer and read again to an equal Config; each bad input refused in one line
// naming the file, the layer's index (and nested path), its line and what is wrong; the key
// refused for other architectures, and required for sequential.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/lib/config.h"
#include "experiments/lib/session.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A Fashion-MNIST config whose model section is `model` (its lines, indented by two).
std::string yaml_with(const std::string& model) {
  return "seed: 1\n"
         "data:\n"
         "  dataset: fashion_mnist\n"
         "model:\n" +
         model;
}

const char* kLayers =
    "  arch: sequential\n"             // line 5
    "  layers:\n"                      // 6
    "    - conv2d(8, 3, padding=1)\n"  // 7: model.layers[0]
    "    - batchnorm2d\n"              // 8
    "    - relu\n"                     // 9
    "    - maxpool2d(2)\n"             // 10
    "    - residual: [conv2d(8, 3, padding=1), batchnorm2d, relu, conv2d(8, 3, padding=1), batchnorm2d]\n"  // 11
    "    - residual:\n"                     // 12: model.layers[5]
    "        - conv2d(8, 1, bias=false)\n"  // 13
    "        - residual: [gelu]\n"          // 14
    "    - relu\n"                          // 15
    "    - adaptive_avgpool2d(1)\n"         // 16
    "    - flatten\n"                       // 17
    "    - dropout(0.1)\n"                  // 18
    "    - linear(10)\n";                   // 19: model.layers[10]

std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return message_of([&] { parse_config(yaml, "m.yaml", sets); });
}

// The error of building the session (the shapes chain there, from the data's).
std::string session_error(const std::string& yaml) {
  return message_of([&] {
    const Config c = parse_config(yaml, "m.yaml");
    make_session(c, synthetic_input_spec(c));
  });
}

}  // namespace

TEST(ConfigLayers, ReadInBlockAndFlowStyleWithWhereEachIs) {
  const Config c = parse_config(yaml_with(kLayers), "m.yaml");
  ASSERT_EQ(c.model.layers.size(), 11u);
  EXPECT_EQ(layer_text(c.model.layers[0]), "conv2d(8, 3, padding=1)");
  EXPECT_EQ(c.model.layers[0].where, "m.yaml: model.layers[0] (line 7)");
  const LayerSpec& res = c.model.layers[4];
  EXPECT_EQ(res.name, "residual");
  ASSERT_EQ(res.body.size(), 5u);  // the flow list's conv2d(8, 3, padding=1), joined again
  EXPECT_EQ(layer_text(res.body[0]), "conv2d(8, 3, padding=1)");
  EXPECT_EQ(layer_text(res.body[3]), "conv2d(8, 3, padding=1)");
  EXPECT_EQ(res.body[2].where, "m.yaml: model.layers[4].residual[2] (line 11)");
  EXPECT_EQ(res.body[3].where, "m.yaml: model.layers[4].residual[3] (line 11)");  // joined, at its first piece
  const LayerSpec& nested = c.model.layers[5];
  ASSERT_EQ(nested.body.size(), 2u);
  EXPECT_EQ(layer_text(nested.body[0]), "conv2d(8, 1, bias=false)");
  EXPECT_EQ(nested.body[1].body[0].where, "m.yaml: model.layers[5].residual[1].residual[0] (line 14)");
  EXPECT_EQ(layer_text(c.model.layers[9]), "dropout(0.1)");
  // It builds, named as nn.Sequential.
  const Session s = make_session(c, synthetic_input_spec(c));
  std::vector<std::string> names;
  for (const auto& [n, t] : s.model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names.front(), "0.weight");
  EXPECT_EQ(names[4], "4.body.0.weight");
  EXPECT_EQ(names.back(), "10.bias");
}

TEST(ConfigLayers, ResolvedConfigRoundTrips) {
  const Config a = parse_config(yaml_with(kLayers), "m.yaml", {"model.layers[3]=maxpool2d(2, stride=2)"});
  EXPECT_EQ(layer_text(a.model.layers[3]), "maxpool2d(2, stride=2)");
  const std::string text = config_to_yaml(a);
  EXPECT_TRUE(has(text, "layers:\n    - conv2d(8, 3, padding=1)\n")) << text;
  EXPECT_TRUE(has(text, "residual:")) << text;
  const Config b = parse_config(text, "resolved.yaml");
  EXPECT_EQ(b.model.layers, a.model.layers);
  EXPECT_EQ(config_to_yaml(b), text);
  // --resume reads a run's config.yaml the same way.
  EXPECT_EQ(b.model.arch, "sequential");
  // --set addresses layers, not the pieces YAML splits a flow list's layers into.
  const Config d = parse_config(yaml_with(kLayers), "m.yaml", {"model.layers[4].residual[3]=conv2d(8, 1)"});
  ASSERT_EQ(d.model.layers[4].body.size(), 5u);
  EXPECT_EQ(layer_text(d.model.layers[4].body[3]), "conv2d(8, 1)");
  EXPECT_EQ(layer_text(d.model.layers[4].body[4]), "batchnorm2d");
  // Other architectures write no layers.
  const Config r = parse_config(yaml_with("  arch: resnet20\n"), "r.yaml");
  EXPECT_FALSE(has(config_to_yaml(r), "layers")) << config_to_yaml(r);
}

TEST(ConfigLayers, BadLayersAreRefusedNamingTheIndexAndKey) {
  for (const auto& [model, says] : std::vector<std::pair<std::string, std::string>>{
           // An unknown layer, listing the known ones.
           {"  arch: sequential\n  layers:\n    - flatten\n    - dense(10)\n",
            "m.yaml: model.layers[1] (line 8): dense(10): unknown layer 'dense' (known: conv2d, batchnorm2d, linear, "
            "maxpool2d, avgpool2d, adaptive_avgpool2d, flatten, dropout, layernorm, relu, leaky_relu"},
           // Nested in a residual, in flow style.
           {"  arch: sequential\n  layers:\n    - conv2d(4, 3)\n    - residual: [relu, batchnorm2d, conv(4, 3)]\n",
            "m.yaml: model.layers[1].residual[2] (line 8): conv(4, 3): unknown layer 'conv'"},
           // Malformed arguments.
           {"  arch: sequential\n  layers:\n    - conv2d(32, x)\n",
            "m.yaml: model.layers[0] (line 7): conv2d(32, x): kernel must be an integer from 1 to 1024, got 'x'"},
           {"  arch: sequential\n  layers:\n    - conv2d(32, 3, pad=1)\n",
            "model.layers[0] (line 7): conv2d(32, 3, pad=1): unknown argument 'pad'; it takes conv2d(out_channels, "
            "kernel, stride=1, padding=0, dilation=1, groups=1, bias=true)"},
           {"  arch: sequential\n  layers:\n    - relu\n    - residual: [conv2d(32, 3, padding=1]\n",
            "m.yaml: model.layers[1].residual[0] (line 8): conv2d(32, 3, padding=1: no closing parenthesis"},
           {"  arch: sequential\n  layers:\n    - linear: 10\n",
            "m.yaml: model.layers[0] (line 7): a mapping here is a residual block, residual: [layer, ...]"},
           {"  arch: sequential\n  layers:\n    - residual: relu\n",
            "m.yaml: model.layers[0].residual (line 7): must be a non-empty list of the layers of x + body(x)"},
           {"  arch: sequential\n  layers:\n    - residual: []\n",
            "model.layers[0].residual (line 7): must be a non-empty"},
           {"  arch: sequential\n  layers:\n    - [relu]\n", "m.yaml: model.layers[0] (line 7): must be a layer"},
           {"  arch: sequential\n  layers: relu\n", "m.yaml: model.layers (line 6): must be a list of layers"},
           {"  arch: sequential\n  layers: []\n", "m.yaml: model.layers (line 6): is empty"},
           // Required for sequential, refused for the others, and sequential reads no activation.
           {"  arch: sequential\n", "model.layers (line 5): is required for model.arch sequential"},
           {"  arch: resnet20\n  layers: [relu]\n", "m.yaml: model.layers (line 6): resnet20 does not use this key"},
           {"  arch: sequential\n  activation: gelu\n  layers: [flatten, linear(10)]\n",
            "m.yaml: model.activation (line 6): sequential does not use this key (it reads model.arch, classes, "
            "in_channels, image_size, layers)"},
       }) {
    const std::string m = parse_error(yaml_with(model));
    EXPECT_TRUE(has(m, says)) << model << "\n" << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // one line
  }
  // A --set is named as such.
  const std::string set = parse_error(yaml_with(kLayers), {"model.layers[2]=rlu"});
  EXPECT_TRUE(has(set, "--set model.layers[2]: model.layers[2]: rlu: unknown layer 'rlu'")) << set;
}

TEST(ConfigLayers, ShapesThatDoNotChainAreRefusedWithTheLine) {
  for (const auto& [model, says] : std::vector<std::pair<std::string, std::string>>{
           {"  arch: sequential\n  layers:\n    - conv2d(8, 3, padding=1)\n    - relu\n    - linear(10)\n",
            "m.yaml: model.layers[2] (line 9): linear(10) takes 2-d input (N, features), gets (N, 8, 28, 28): add "
            "flatten before it"},
           {"  arch: sequential\n  layers:\n    - conv2d(8, 3)\n    - residual: [conv2d(8, 3, padding=1), relu, "
            "maxpool2d(2)]\n    - flatten\n    - linear(10)\n",
            "m.yaml: model.layers[1] (line 8): the residual's body changes the shape (N, 8, 26, 26) -> (N, 8, 13, 13)"},
           {"  arch: sequential\n  layers:\n    - flatten\n    - residual: [relu, batchnorm2d]\n    - linear(10)\n",
            "m.yaml: model.layers[1].residual[1] (line 8): batchnorm2d takes 4-d input (N, C, H, W), gets (N, 784)"},
           // The classifier's width against the data's 10 classes (or model.classes).
           {"  arch: sequential\n  layers:\n    - flatten\n    - linear(12)\n",
            "m.yaml: model.layers[1] (line 8): the model's output is (N, 12), but the loss takes (N, 10), one logit "
            "per class (the data's classes, or model.classes): change model.layers[1] linear(12) to linear(10)"},
           {"  arch: sequential\n  classes: 12\n  layers:\n    - flatten\n    - linear(10)\n",
            "the loss takes (N, 12)"},
           {"  arch: sequential\n  layers:\n    - conv2d(10, 3)\n", "end the list with flatten and linear(10)"},
       }) {
    const std::string m = session_error(yaml_with(model));
    EXPECT_TRUE(has(m, says)) << model << "\n" << m;
  }
  EXPECT_EQ(session_error(yaml_with("  arch: sequential\n  classes: 12\n  layers: [flatten, linear(12)]\n")),
            "(no error)");
  EXPECT_EQ(session_error(yaml_with("  arch: sequential\n  image_size: 28\n  in_channels: 1\n  layers: [flatten, "
                                    "linear(10)]\n")),
            "(no error)");
}
