#include "experiments/lib/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace packrat {

namespace {
const char* type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "a boolean";
    case Json::Type::Int: return "an integer";
    case Json::Type::Double: return "a number";
    case Json::Type::String: return "a string";
    case Json::Type::Array: return "an array";
    case Json::Type::Object: return "an object";
  }
  return "?";
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view s, std::string_view what) : s_(s), what_(what) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(std::string_view msg) { fail("{}: invalid JSON at byte {}: {}", what_, pos_, msg); }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) error(fmt::format("expected '{}'", c));
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  Json value(int depth) {
    if (depth > 64) error("nesting deeper than 64 levels");
    skip_ws();
    if (pos_ >= s_.size()) error("unexpected end of text");
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      Json o = Json::object();
      if (consume('}')) return o;
      do {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a string key");
        std::string key = string();
        if (o.find(key)) error(fmt::format("duplicate key \"{}\"", key));
        expect(':');
        o[key] = value(depth + 1);
      } while (consume(','));
      expect('}');
      return o;
    }
    if (c == '[') {
      ++pos_;
      Json a = Json::array();
      if (consume(']')) return a;
      do a.push_back(value(depth + 1));
      while (consume(','));
      expect(']');
      return a;
    }
    if (c == '"') return Json(string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    return number();
  }

  Json number() {
    const size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    bool integral = true;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    const std::string_view tok = s_.substr(start, pos_ - start);
    if (tok.empty() || tok == "-") {
      pos_ = start;
      error("expected a value");
    }
    if (integral) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (ec == std::errc() && end == tok.data() + tok.size()) return Json(v);
    }
    double d = 0;
    auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (ec != std::errc() || end != tok.data() + tok.size()) {
      pos_ = start;
      error(fmt::format("bad number '{}'", tok));
    }
    return Json(d);
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            const uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: error(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  std::string_view s_, what_;
  size_t pos_ = 0;
};
}  // namespace

bool Json::boolean() const {
  PACKRAT_CHECK(type_ == Type::Bool, "json: expected a boolean, got {}", type_name(type_));
  return bool_;
}

double Json::number() const {
  if (type_ == Type::Int) return static_cast<double>(int_);
  PACKRAT_CHECK(type_ == Type::Double, "json: expected a number, got {}", type_name(type_));
  return double_;
}

int64_t Json::integer() const {
  if (type_ == Type::Int) return int_;
  PACKRAT_CHECK(type_ == Type::Double && std::floor(double_) == double_ && std::abs(double_) < 9.2e18,
                "json: expected an integer, got {}", type_ == Type::Double ? fmt::format("{}", double_) : type_name(type_));
  return static_cast<int64_t>(double_);
}

const std::string& Json::str() const {
  PACKRAT_CHECK(type_ == Type::String, "json: expected a string, got {}", type_name(type_));
  return string_;
}

const std::vector<Json>& Json::items() const {
  PACKRAT_CHECK(type_ == Type::Array, "json: expected an array, got {}", type_name(type_));
  return items_;
}

const std::vector<std::pair<std::string, Json>>& Json::members() const {
  PACKRAT_CHECK(type_ == Type::Object, "json: expected an object, got {}", type_name(type_));
  return members_;
}

Json& Json::operator[](const std::string& key) {
  if (type_ == Type::Null) type_ = Type::Object;
  PACKRAT_CHECK(type_ == Type::Object, "json: cannot index {} with \"{}\"", type_name(type_), key);
  for (auto& [k, v] : members_)
    if (k == key) return v;
  members_.emplace_back(key, Json());
  return members_.back().second;
}

const Json* Json::find(const std::string& key) const {
  if (type_ != Type::Object) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const Json& Json::at(const std::string& key) const {
  const Json* v = find(key);
  PACKRAT_CHECK(v != nullptr, "json: missing key \"{}\"", key);
  return *v;
}

void Json::push_back(Json v) {
  if (type_ == Type::Null) type_ = Type::Array;
  PACKRAT_CHECK(type_ == Type::Array, "json: push_back on {}", type_name(type_));
  items_.push_back(std::move(v));
}

size_t Json::size() const {
  if (type_ == Type::Array) return items_.size();
  if (type_ == Type::Object) return members_.size();
  return 0;
}

std::string json_escape(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (type_) {
    case Type::Null: out += "null"; return;
    case Type::Bool: out += bool_ ? "true" : "false"; return;
    case Type::Int: out += std::to_string(int_); return;
    case Type::Double:
      if (!std::isfinite(double_)) {
        out += "null";
      } else {
        char buf[32];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, double_);  // shortest round-trip form
        out.append(buf, end);
      }
      return;
    case Type::String: out += json_escape(string_); return;
    case Type::Array:
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        items_[i].dump_to(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(depth);
      out += ']';
      return;
    case Type::Object:
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        out += json_escape(members_[i].first);
        out += ": ";
        members_[i].second.dump_to(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(depth);
      out += '}';
      return;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

Json Json::parse(std::string_view text, std::string_view what) { return Parser(text, what).document(); }

}  // namespace packrat
