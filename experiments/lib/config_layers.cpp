#include "experiments/lib/config_layers.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace packrat::config {

namespace {

// One item of a list as written, and where it starts.
struct Item {
  YAML::Node node;
  std::string text;  // a scalar's text (joined back, see below)
};

int64_t depth(const std::string& s) {
  return std::count(s.begin(), s.end(), '(') - std::count(s.begin(), s.end(), ')');
}

// The list's items. In a flow list ([conv2d(32, 3, padding=1), relu]) YAML splits a layer at the
// commas between its arguments: scalars are joined again while their parentheses are open. (The
// file's lists are joined by join_split_layers already; a list given whole by --set is joined here.)
std::vector<Item> items_of(const YAML::Node& list) {
  std::vector<Item> out;
  const bool flow = list.Style() == YAML::EmitterStyle::Flow;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node n = list[i];
    Item item{n, n.IsScalar() ? n.Scalar() : ""};
    while (flow && n.IsScalar() && depth(item.text) > 0 && i + 1 < list.size() && list[i + 1].IsScalar())
      item.text += ", " + list[++i].Scalar();
    out.push_back(item);
  }
  return out;
}

std::vector<LayerSpec> parse_list(const YAML::Node& list, const std::string& path, const Section& s) {
  if (!list.IsSequence())
    s.error_at(path, list.Mark(),
               "must be a list of layers, e.g. [conv2d(32, 3, padding=1), batchnorm2d, relu, flatten, linear(10)]");
  std::vector<LayerSpec> out;
  const std::vector<Item> items = items_of(list);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    const YAML::Node n = items[i].node;
    LayerSpec l;
    if (n.IsMap()) {
      if (n.size() != 1 || !n.begin()->first.IsScalar() || n.begin()->first.Scalar() != "residual")
        s.error_at(at, n.Mark(),
                   fmt::format("a mapping here is a residual block, residual: [layer, ...]; other layers are "
                               "written as text, e.g. conv2d(32, 3, padding=1) (known: {})",
                               known_layer_names()));
      const YAML::Node body = n.begin()->second;
      if (!body.IsSequence() || body.size() == 0)
        s.error_at(at + ".residual", body.IsDefined() && !body.IsNull() ? body.Mark() : n.Mark(),
                   "must be a non-empty list of the layers of x + body(x), e.g. [conv2d(32, 3, padding=1), "
                   "batchnorm2d, relu, conv2d(32, 3, padding=1), batchnorm2d]");
      l = residual_layer(parse_list(body, at + ".residual", s));
    } else if (n.IsScalar()) {
      try {
        l = parse_layer(items[i].text);
      } catch (const Error& e) {
        s.error_at(at, n.Mark(), e.what());
      }
    } else {
      s.error_at(at, n.Mark(),
                 fmt::format("must be a layer, e.g. relu or linear(10) (known: {})", known_layer_names()));
    }
    l.where = s.where(at, n.Mark());
    out.push_back(std::move(l));
  }
  return out;
}

// A scalar holding `text` whose mark is `at` (the line and column of the piece it replaces):
// yaml-cpp sets marks only while it parses, so the scalar is parsed there.
YAML::Node scalar_at(const std::string& text, const YAML::Mark& at) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << text;
  const std::string padding = at.is_null() ? "" : std::string(at.line, '\n') + std::string(at.column, ' ');
  return YAML::Load(padding + e.c_str());
}

// Joins the pieces of `list` (and of every residual's list in it) in place, see items_of.
void join_pieces(YAML::Node list) {
  if (!list.IsSequence()) return;
  if (list.Style() == YAML::EmitterStyle::Flow)
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node first = list[i];
      if (!first.IsScalar()) continue;
      std::string text = first.Scalar();
      size_t last = i;
      while (depth(text) > 0 && last + 1 < list.size() && list[last + 1].IsScalar())
        text += ", " + list[++last].Scalar();
      if (last == i) continue;
      list[i] = scalar_at(text, first.Mark());
      for (size_t k = last; k > i; --k) list.remove(k);
    }
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    if (item.IsMap() && item["residual"].IsDefined()) join_pieces(item["residual"]);
  }
}

}  // namespace

void join_split_layers(YAML::Node root) {
  const YAML::Node& r = root;  // const lookups add no keys
  if (!r.IsMap() || !r["model"].IsMap()) return;
  const YAML::Node model = r["model"];
  if (model["layers"].IsDefined()) join_pieces(model["layers"]);
}

std::vector<LayerSpec> parse_layers(Section& model) {
  const YAML::Node n = model.raw("layers");
  if (!n.IsDefined()) return {};
  const std::string path = model.key_path("layers");
  std::vector<LayerSpec> layers = parse_list(n, path, model);
  if (layers.empty()) model.error_at(path, n.Mark(), "is empty; give the model's layers, e.g. [flatten, linear(10)]");
  return layers;
}

void emit_layers(YAML::Emitter& e, const std::vector<LayerSpec>& layers) {
  e << YAML::BeginSeq;
  for (const LayerSpec& l : layers) {
    if (l.name == "residual") {
      e << YAML::BeginMap << YAML::Key << "residual" << YAML::Value;
      emit_layers(e, l.body);
      e << YAML::EndMap;
    } else {
      e << layer_text(l);
    }
  }
  e << YAML::EndSeq;
}

}  // namespace packrat::config
