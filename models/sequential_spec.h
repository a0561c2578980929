#pragma once
// The layers of a `model.arch: sequential` model (models/sequential_model.h) as the config writes
// them: "conv2d(32, 3, padding=1)", "batchnorm2d", "relu", "linear(10)", and `residual: [...]`.
// A layer's text is a name and, in parentheses, arguments by position or as key=value, as PyTorch
// writes the module's constructor; the input channels / features are left out (the model chains
// them from the data's shape).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace packrat {

// One layer of the list: its name, its arguments, and for a residual its body.
struct LayerSpec {
  std::string name;  // conv2d, batchnorm2d, relu, ..., residual
  // Every argument of the layer's signature in its order, defaults filled in, booleans as 0 / 1:
  // conv2d {out_channels, kernel, stride, padding, dilation, groups, bias}.
  std::vector<std::pair<std::string, double>> args;
  std::vector<LayerSpec> body;  // residual only: x + body(x), the body a nested nn.Sequential
  // Where the config wrote it, for messages ("configs/m.yaml: model.layers[4] (line 9)"); "": the
  // model names it model.layers[i] itself. Not part of the layer's value (operator==).
  std::string where;

  double arg(std::string_view key) const;  // throws when the signature has no such argument
  bool operator==(const LayerSpec& o) const { return name == o.name && args == o.args && body == o.body; }
};

// Parses one layer's text ("conv2d(32, 3, padding=1)"). Throws packrat::Error with a message
// that starts with the text and says what is wrong: an unknown name (listing the known ones), a
// missing, unknown, repeated or out-of-range argument, a value of the wrong type.
LayerSpec parse_layer(std::string_view text);
// `residual` with its body (the body's layers parsed already).
LayerSpec residual_layer(std::vector<LayerSpec> body);

// The canonical text of a layer (not residual): its name, the arguments without a default by
// position, then those that differ from their default as key=value: "conv2d(32, 3, padding=1)".
// parse_layer reads it back to an equal LayerSpec.
std::string layer_text(const LayerSpec& l);

// Every layer name parse_layer knows, then "residual": "conv2d, batchnorm2d, ..., residual".
std::string known_layer_names();
// Whether a name is a parameter-free activation of autograd/pointwise.h (relu, gelu, ...).
bool is_activation_layer(std::string_view name);

}  // namespace packrat
