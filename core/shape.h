#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace packrat {

// Logical shape of a tensor, outermost dimension first.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t operator[](int64_t i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t& operator[](int64_t i) { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const {
    std::string s = "(";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + (dims_.size() == 1 ? ",)" : ")");
  }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace packrat
