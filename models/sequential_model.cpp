#include "models/sequential_model.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/init.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/pooling.h"

namespace packrat {

Residual::Residual(std::shared_ptr<Sequential> body) : body_(register_module("body", std::move(body))) {}

Tensor Residual::forward(const Tensor& x) { return ops::add(x, (*body_)(x)); }

namespace {

// A sample's shape without the batch: (C, H, W) or (F).
using Dims = std::vector<int64_t>;

std::string shape_text(const Dims& d) { return fmt::format("(N, {})", fmt::join(d, ", ")); }

// Builds the layers into `into`, chaining the shape; each layer named by its `where` or, unset,
// by `path`[i] (model.layers[4].residual[2]).
class Builder {
 public:
  explicit Builder(uint64_t seed) : seeds_(seed) {}

  Dims build(const std::vector<LayerSpec>& layers, const std::string& path, Dims in, Sequential& into) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const LayerSpec& l = layers[i];
      const std::string at = fmt::format("{}[{}]", path, i);
      in = add(l, l.where.empty() ? at : l.where, at, in, into);
    }
    return in;
  }

 private:
  // Appends one layer taking `in`; returns its output's shape.
  Dims add(const LayerSpec& l, const std::string& where, const std::string& at, const Dims& in, Sequential& into) {
    const std::string text = l.name == "residual" ? "residual" : layer_text(l);
    auto i64 = [&](const char* key) { return static_cast<int64_t>(l.arg(key)); };
    auto need_4d = [&](const char* hint) {
      if (in.size() != 3) fail("{}: {} takes 4-d input (N, C, H, W), gets {}{}", where, text, shape_text(in), hint);
    };
    if (l.name == "residual") {
      if (l.body.empty())
        fail("{}: residual has no layers; give its body, residual: [conv2d(32, 3, padding=1), ...]", where);
      auto body = std::make_shared<Sequential>();
      const Dims out = build(l.body, at + ".residual", in, *body);
      if (out != in)
        fail("{}: the residual's body changes the shape {} -> {}, but x + body(x) needs its input's shape back", where,
             shape_text(in), shape_text(out));
      into.add(std::make_shared<Residual>(body));
      return in;
    }
    if (l.name == "conv2d") {
      need_4d("");
      ConvConfig c{.stride = i64("stride"),
                   .padding = i64("padding"),
                   .dilation = i64("dilation"),
                   .groups = i64("groups"),
                   .bias = l.arg("bias") != 0};
      const int64_t out = i64("out_channels"), k = i64("kernel");
      if (in[0] % c.groups != 0 || out % c.groups != 0)
        fail("{}: {} has groups={}, which must divide its input's {} channels (input {}) and its {} out_channels",
             where, text, c.groups, in[0], shape_text(in), out);
      const int64_t reach = c.dilation * (k - 1) + 1;
      const int64_t h = (in[1] + 2 * c.padding - reach) / c.stride + 1,
                    w = (in[2] + 2 * c.padding - reach) / c.stride + 1;
      if (in[1] + 2 * c.padding < reach || in[2] + 2 * c.padding < reach)
        fail("{}: {} does not fit its input {}: the kernel spans {} pixels, the padded input {}x{}", where, text,
             shape_text(in), reach, in[1] + 2 * c.padding, in[2] + 2 * c.padding);
      into.add(std::make_shared<Conv2d>(in[0], out, k, c, seeds_.next()));
      return {out, h, w};
    }
    if (l.name == "batchnorm2d") {
      need_4d(" (there is no batchnorm1d: use layernorm after flatten)");
      into.add(std::make_shared<BatchNorm2d>(in[0], static_cast<float>(l.arg("momentum")),
                                             static_cast<float>(l.arg("eps"))));
      return in;
    }
    if (l.name == "maxpool2d" || l.name == "avgpool2d") {
      need_4d("");
      const int64_t k = i64("kernel"), p = i64("padding"), s = i64("stride") == 0 ? k : i64("stride");
      if (2 * p > k) fail("{}: {} has padding {}, more than half its kernel {}", where, text, p, k);
      if (in[1] + 2 * p < k || in[2] + 2 * p < k)
        fail("{}: {} does not fit its input {}: a {}x{} window over {}x{}", where, text, shape_text(in), k, k,
             in[1] + 2 * p, in[2] + 2 * p);
      if (l.name == "maxpool2d")
        into.add(std::make_shared<MaxPool2d>(k, s, p));
      else
        into.add(std::make_shared<AvgPool2d>(k, s, p));
      return {in[0], (in[1] + 2 * p - k) / s + 1, (in[2] + 2 * p - k) / s + 1};
    }
    if (l.name == "adaptive_avgpool2d") {
      need_4d("");
      const int64_t o = i64("output_size");
      into.add(std::make_shared<AdaptiveAvgPool2d>(o, o));
      return {in[0], o, o};
    }
    if (l.name == "flatten") {
      into.add(std::make_shared<Flatten>());
      int64_t features = 1;
      for (int64_t d : in) features *= d;
      return {features};
    }
    if (l.name == "linear") {
      if (in.size() != 1)
        fail("{}: {} takes 2-d input (N, features), gets {}: add flatten before it", where, text, shape_text(in));
      const int64_t out = i64("out_features");
      into.add(std::make_shared<Linear>(in[0], out, l.arg("bias") != 0, seeds_.next()));
      return {out};
    }
    if (l.name == "layernorm") {
      if (in.size() != 1)
        fail("{}: {} normalizes the features of 2-d input (N, features), gets {}: add flatten before it", where, text,
             shape_text(in));
      into.add(std::make_shared<LayerNorm>(in[0], static_cast<float>(l.arg("eps"))));
      return in;
    }
    if (l.name == "dropout") {
      into.add(std::make_shared<Dropout>(static_cast<float>(l.arg("p"))));
      return in;
    }
    if (is_activation_layer(l.name)) {
      into.add(std::make_shared<Activation>(l.name));
      return in;
    }
    fail("{}: unknown layer '{}' (known: {})", where, l.name, known_layer_names());
  }

  init::SeedSequence seeds_;
};

// The index and text of the last linear layer at the top level, for the classes message.
std::string last_linear(const std::vector<LayerSpec>& layers) {
  for (size_t i = layers.size(); i-- > 0;)
    if (layers[i].name == "linear") return fmt::format("model.layers[{}] {}", i, layer_text(layers[i]));
  return "";
}

}  // namespace

std::shared_ptr<Module> make_sequential_model(const ModelSpec& spec) {
  PACKRAT_CHECK(!spec.layers.empty(),
                "model.layers: model.arch {} needs its list of layers, e.g. [conv2d(32, 3, padding=1), relu, "
                "adaptive_avgpool2d(1), flatten, linear(10)]",
                spec.arch);
  PACKRAT_CHECK(
      spec.in_channels > 0 && spec.image_size > 0,
      "model {}: the input's channels ({}) and side (image_size {}) must be known to chain the layers' shapes",
      spec.arch, spec.in_channels, spec.image_size);
  auto model = std::make_shared<Sequential>();
  Builder b(spec.seed);
  const Dims out = b.build(spec.layers, "model.layers", {spec.in_channels, spec.image_size, spec.image_size}, *model);
  const LayerSpec& last = spec.layers.back();
  const std::string where = last.where.empty() ? fmt::format("model.layers[{}]", spec.layers.size() - 1) : last.where;
  if (out.size() != 1 || out[0] != spec.num_classes) {
    const std::string linear = last_linear(spec.layers);
    const std::string fix = out.size() != 1  ? fmt::format("end the list with flatten and linear({})", spec.num_classes)
                            : linear.empty() ? fmt::format("end the list with linear({})", spec.num_classes)
                                             : fmt::format("change {} to linear({})", linear, spec.num_classes);
    fail(
        "{}: the model's output is {}, but the loss takes (N, {}), one logit per class (the data's classes, or "
        "model.classes): {}",
        where, shape_text(out), spec.num_classes, fix);
  }
  return model;
}

}  // namespace packrat
