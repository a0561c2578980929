#pragma once
// A small JSON value with an exact parser and a writer: the safetensors header, memory_report.json,
// metrics.jsonl and the benchmark's result line. Object members keep their insertion order.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace packrat {

class Json {
 public:
  enum class Type { Null, Bool, Int, Double, String, Array, Object };

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), bool_(b) {}
  Json(int v) : type_(Type::Int), int_(v) {}
  Json(int64_t v) : type_(Type::Int), int_(v) {}
  Json(uint64_t v) : type_(Type::Int), int_(static_cast<int64_t>(v)) {}
  Json(double v) : type_(Type::Double), double_(v) {}
  Json(const char* s) : type_(Type::String), string_(s) {}
  Json(std::string s) : type_(Type::String), string_(std::move(s)) {}
  Json(std::string_view s) : type_(Type::String), string_(s) {}
  static Json array() { Json j; j.type_ = Type::Array; return j; }
  static Json object() { Json j; j.type_ = Type::Object; return j; }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Double; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed access; throws packrat::Error on a type mismatch.
  bool boolean() const;
  double number() const;    // Int or Double
  int64_t integer() const;  // Int, or a Double with an integral value
  const std::string& str() const;
  const std::vector<Json>& items() const;
  const std::vector<std::pair<std::string, Json>>& members() const;

  // Objects: insert-or-get; find returns nullptr when absent; at throws naming the key.
  Json& operator[](const std::string& key);
  const Json* find(const std::string& key) const;
  const Json& at(const std::string& key) const;
  // Arrays.
  void push_back(Json v);
  size_t size() const;

  // Compact when indent < 0. Non-finite doubles are written as null (JSON has no NaN).
  std::string dump(int indent = -1) const;
  // Throws packrat::Error "<what>: invalid JSON at byte N: ..." on malformed text.
  static Json parse(std::string_view text, std::string_view what = "json");

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  Type type_ = Type::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

std::string json_escape(std::string_view s);  // with the surrounding quotes

}  // namespace packrat
