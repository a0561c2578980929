#pragma once
// Tensor: a cheap handle over a contiguous buffer from the allocator.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace packrat {

struct AutogradMeta;  // autograd/tape.h

// The buffer and its in-place version counter; shared by a tensor and its views.
struct Storage {
  std::shared_ptr<Allocation> allocation;
  int64_t version = 0;
  uint64_t id = 0;  // unique for the process's lifetime (addresses are reused; ids are not)
};

class Tensor {
 public:
  Tensor() = default;

  // New uninitialised tensor; tag defaults to the thread's TagScope (Activation in forward).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain);
  static Tensor empty(const Shape& shape, DType dtype, Layout layout, MemTag tag);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<double>& values);
  static Tensor empty_like(const Tensor& t);  // same shape, dtype, layout
  static Tensor zeros_like(const Tensor& t);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim(int64_t i) const { return impl_->shape[i]; }
  int64_t rank() const { return impl_->shape.rank(); }
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return Device::CPU; }
  Layout layout() const { return impl_->layout; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  template <typename T> T* data() const {
    check_dtype(dtype_of<T>(), "data<T>()");
    return static_cast<T*>(raw());
  }
  void* raw() const { return impl_->storage->allocation->data(); }
  template <typename T> std::span<T> span() const { return {data<T>(), static_cast<size_t>(numel())}; }

  // In-place version counter (shared with views): bumped by every in-place op.
  int64_t version() const { return impl_->storage->version; }
  void bump_version() { ++impl_->storage->version; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  bool same_storage(const Tensor& o) const { return impl_->storage == o.impl_->storage; }

  // A view with another shape over the same plain data (no copy).
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 1) const;  // (N, ...) -> (N, prod(rest)); plain data only
  Tensor clone() const;                          // deep copy, same layout, current TagScope tag
  Tensor to_layout(Layout layout) const;         // reorder (a copy) or *this when already there
  Tensor to_plain() const { return to_layout(Layout::Plain); }
  Tensor to(DType dtype) const;                  // conversion copy
  std::vector<float> to_vector() const;          // logical NCHW order, any layout, f32/f64 data
  float item() const;

  // Autograd: leaves that require grad accumulate into grad().
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;
  void zero_grad();
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return impl_->meta; }
  std::shared_ptr<AutogradMeta>& autograd_meta() { return impl_->meta; }

  void check_dtype(DType expected, const char* where) const;
  std::string describe() const;  // "(64, 3, 32, 32) f32 plain"

 private:
  struct Impl {
    std::shared_ptr<Storage> storage;
    Shape shape;
    DType dtype = DType::f32;
    Layout layout = Layout::Plain;
    std::shared_ptr<AutogradMeta> meta;
  };
  std::shared_ptr<Impl> impl_;
};

// Element offset of logical (n, c, h, w) in a 4-d buffer of the given layout.
inline int64_t nchw_offset(Layout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (l == Layout::Plain) return ((n * C + c) * H + h) * W + w;
  const int64_t cb = c / kChannelBlock, ci = c % kChannelBlock;
  return (((n * (C / kChannelBlock) + cb) * H + h) * W + w) * kChannelBlock + ci;
}

}  // namespace packrat
