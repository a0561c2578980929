#include "models/sequential_spec.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "autograd/pointwise.h"
#include "core/activation_id.h"
#include "core/error.h"

namespace packrat {

namespace {

enum class ArgKind { Integer, Number, Boolean };

// One argument of a layer's constructor: its key, type, default and range.
struct Param {
  std::string key;
  ArgKind kind = ArgKind::Integer;
  bool required = false;
  double def = 0, lo = 0, hi = 0;
  bool by_position = false;  // the canonical text writes it without its key (dropout(0.1))
  std::string def_doc;       // the default as the signature shows it, when not the number ("kernel")
};

// A layer's name and its arguments in PyTorch's order (without the inferred input size).
struct Signature {
  std::string name;
  std::vector<Param> params;
};

Param required_int(std::string key, double lo, double hi) {
  return {std::move(key), ArgKind::Integer, true, 0, lo, hi, true, ""};
}
Param optional_int(std::string key, double def, double lo, double hi, std::string def_doc = "") {
  return {std::move(key), ArgKind::Integer, false, def, lo, hi, false, std::move(def_doc)};
}
Param optional_number(std::string key, double def, double lo, double hi, bool by_position = false) {
  return {std::move(key), ArgKind::Number, false, def, lo, hi, by_position, ""};
}
Param boolean(std::string key, bool def) {
  return {std::move(key), ArgKind::Boolean, false, def ? 1.0 : 0.0, 0, 1, false, ""};
}

constexpr double kMaxSize = 1 << 16;

// Every layer but residual: the modules of layers/, then the activations of autograd/pointwise.h.
const std::vector<Signature>& signatures() {
  static const std::vector<Signature> table = [] {
    std::vector<Signature> t = {
        {"conv2d",
         {required_int("out_channels", 1, kMaxSize), required_int("kernel", 1, 1024),
          optional_int("stride", 1, 1, 1024), optional_int("padding", 0, 0, 1024), optional_int("dilation", 1, 1, 1024),
          optional_int("groups", 1, 1, kMaxSize), boolean("bias", true)}},
        {"batchnorm2d", {optional_number("eps", 1e-5, 1e-12, 1), optional_number("momentum", 0.1, 0, 1)}},
        {"linear", {required_int("out_features", 1, 1 << 24), boolean("bias", true)}},
        // stride 0 stands for "the kernel", PyTorch's default; it cannot be written.
        {"maxpool2d",
         {required_int("kernel", 1, 1024), optional_int("stride", 0, 1, 1024, "kernel"),
          optional_int("padding", 0, 0, 512)}},
        {"avgpool2d",
         {required_int("kernel", 1, 1024), optional_int("stride", 0, 1, 1024, "kernel"),
          optional_int("padding", 0, 0, 512)}},
        {"adaptive_avgpool2d", {required_int("output_size", 1, kMaxSize)}},
        {"flatten", {}},
        {"dropout", {optional_number("p", 0.5, 0, 0.999, true)}},
        {"layernorm", {optional_number("eps", 1e-5, 1e-12, 1)}},
    };
    for (int i = 0; i < kNumActivations; ++i)
      t.push_back({std::string(pointwise_by_id(static_cast<ActivationId>(i)).name), {}});
    return t;
  }();
  return table;
}

const Signature* find_signature(std::string_view name) {
  for (const Signature& s : signatures())
    if (s.name == name) return &s;
  return nullptr;
}

std::string value_text(const Param& p, double v) {
  if (p.kind == ArgKind::Boolean) return v != 0 ? "true" : "false";
  if (p.kind == ArgKind::Integer) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);  // shortest round-trip form
}

// "conv2d(out_channels, kernel, stride=1, padding=0, dilation=1, groups=1, bias=true)".
std::string signature_text(const Signature& s) {
  if (s.params.empty()) return s.name + " (no arguments)";
  std::string out;
  for (const Param& p : s.params) {
    const std::string def = p.def_doc.empty() ? value_text(p, p.def) : p.def_doc;
    out += (out.empty() ? "" : ", ") + (p.required ? p.key : p.key + "=" + def);
  }
  return s.name + "(" + out + ")";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_args(std::string_view inner) {
  std::vector<std::string_view> out;
  if (trim(inner).empty()) return out;
  size_t start = 0;
  for (size_t i = 0; i <= inner.size(); ++i)
    if (i == inner.size() || inner[i] == ',') {
      out.push_back(trim(inner.substr(start, i - start)));
      start = i + 1;
    }
  return out;
}

// The value of `p` from its text; throws (after `text`, the layer's) when it is not one.
double parse_value(std::string_view text, const Param& p, std::string_view v) {
  auto range = [&] {
    return p.kind == ArgKind::Integer ? fmt::format("an integer from {} to {}", p.lo, p.hi)
                                      : fmt::format("a number from {} to {}", p.lo, p.hi);
  };
  if (p.kind == ArgKind::Boolean) {
    if (v == "true" || v == "True") return 1;
    if (v == "false" || v == "False") return 0;
    fail("{}: {} must be true or false, got '{}'", text, p.key, v);
  }
  double x = 0;
  if (p.kind == ArgKind::Integer) {
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      fail("{}: {} must be {}, got '{}'", text, p.key, range(), v);
    x = static_cast<double>(n);
  } else {
    const std::string s(v);
    char* end = nullptr;
    x = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x))
      fail("{}: {} must be {}, got '{}'", text, p.key, range(), v);
  }
  if (x < p.lo || x > p.hi) fail("{}: {} must be {}, got {}", text, p.key, range(), v);
  return x;
}

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

double LayerSpec::arg(std::string_view key) const {
  for (const auto& [k, v] : args)
    if (k == key) return v;
  fail("layer {}: has no argument '{}'", name, key);
}

LayerSpec parse_layer(std::string_view written) {
  const std::string_view text = trim(written);
  if (text.empty()) fail("an empty layer: give a layer, e.g. relu or linear(10) (known: {})", known_layer_names());
  size_t n = 0;
  while (n < text.size() && identifier_char(text[n])) ++n;
  const std::string name(text.substr(0, n));
  const std::string_view rest = trim(text.substr(n));
  if (name.empty() || (!rest.empty() && rest.front() != '('))
    fail(
        "{}: is not a layer; write a layer's name, with its arguments in parentheses if it takes any, e.g. "
        "conv2d(32, 3, padding=1)",
        text);
  if (name == "residual")
    fail("{}: a residual is a mapping with its layers, residual: [conv2d(32, 3, padding=1), batchnorm2d, ...]", text);
  const Signature* sig = find_signature(name);
  if (!sig) fail("{}: unknown layer '{}' (known: {})", text, name, known_layer_names());
  std::vector<std::string_view> items;
  if (!rest.empty()) {
    if (rest.back() != ')') fail("{}: no closing parenthesis after the arguments", text);
    const std::string_view inner = rest.substr(1, rest.size() - 2);
    if (inner.find_first_of("()") != std::string_view::npos) fail("{}: unbalanced parentheses", text);
    items = split_args(inner);
  }
  LayerSpec l;
  l.name = name;
  std::vector<bool> given(sig->params.size(), false);
  std::vector<double> values(sig->params.size());
  for (size_t i = 0; i < sig->params.size(); ++i) values[i] = sig->params[i].def;
  bool keywords = false;
  for (size_t a = 0; a < items.size(); ++a) {
    const std::string_view item = items[a];
    if (item.empty()) fail("{}: argument {} is empty", text, a + 1);
    const size_t eq = item.find('=');
    size_t i = 0;
    std::string_view value;
    if (eq == std::string_view::npos) {
      if (keywords) fail("{}: '{}' by position after a key=value argument; write it as key=value", text, item);
      if (a >= sig->params.size())
        fail("{}: {} argument(s), but {} takes {}: {}", text, items.size(), name, sig->params.size(),
             signature_text(*sig));
      i = a;
      value = item;
    } else {
      keywords = true;
      const std::string_view key = trim(item.substr(0, eq));
      value = trim(item.substr(eq + 1));
      while (i < sig->params.size() && sig->params[i].key != key) ++i;
      if (i == sig->params.size()) fail("{}: unknown argument '{}'; it takes {}", text, key, signature_text(*sig));
      if (given[i]) fail("{}: {} is given twice", text, key);
    }
    given[i] = true;
    values[i] = parse_value(text, sig->params[i], value);
  }
  for (size_t i = 0; i < sig->params.size(); ++i) {
    if (sig->params[i].required && !given[i])
      fail("{}: {} is missing; it takes {}", text, sig->params[i].key, signature_text(*sig));
    l.args.emplace_back(sig->params[i].key, values[i]);
  }
  return l;
}

LayerSpec residual_layer(std::vector<LayerSpec> body) {
  LayerSpec l;
  l.name = "residual";
  l.body = std::move(body);
  return l;
}

std::string layer_text(const LayerSpec& l) {
  const Signature* sig = find_signature(l.name);
  if (!sig) return l.name;  // residual: written as a mapping by its caller
  std::string out;
  bool positional = true;
  for (const Param& p : sig->params) {
    const double v = l.arg(p.key);
    if (!p.required && v == p.def) {
      positional = false;
      continue;
    }
    const bool bare = p.required || (positional && p.by_position);
    positional = positional && bare;
    out += (out.empty() ? "" : ", ") + (bare ? "" : p.key + "=") + value_text(p, v);
  }
  return out.empty() ? l.name : l.name + "(" + out + ")";
}

std::string known_layer_names() {
  std::string out;
  for (const Signature& s : signatures()) out += s.name + ", ";
  return out + "residual";
}

bool is_activation_layer(std::string_view name) { return is_pointwise_name(name); }

}  // namespace packrat
