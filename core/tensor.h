#pragma once
// Tensor: a cheap handle over a contiguous buffer from the allocator.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace packrat {

struct AutogradMeta;  // autograd/tape.h

// The buffer, the device it lives on and its in-place version counter; shared by a tensor and
// its views.
struct Storage {
  std::shared_ptr<Allocation> allocation;
  Device device;
  int64_t version = 0;
  uint64_t id = 0;  // unique for the process's lifetime (addresses are reused; ids are not)
  // Copies made from these bytes and kept for reuse (a weight reordered for a primitive:
  // core/cpu/weight_cache.cpp), owned here so that they are freed with the storage.
  std::shared_ptr<void> derived;
};

class Tensor {
 public:
  Tensor() = default;

  // New uninitialised tensor on the thread's DeviceScope device (the CPU unless set), tagged
  // with the thread's TagScope (Activation in forward) unless a tag is given.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain);
  static Tensor empty(const Shape& shape, DType dtype, Layout layout, MemTag tag);
  static Tensor empty(const Shape& shape, DType dtype, Layout layout, MemTag tag, Device device);
  // ... from a given allocator (a pool of page-locked host memory: core/copy_engine.h), on its device.
  static Tensor empty_in(Allocator& allocator, const Shape& shape, DType dtype, Layout layout, MemTag tag);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Layout layout = Layout::Plain);
  static Tensor full(const Shape& shape, float value);
  // Values from the host, placed on the DeviceScope device.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<double>& values);
  static Tensor empty_like(const Tensor& t);  // same shape, dtype, layout and device
  static Tensor zeros_like(const Tensor& t);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim(int64_t i) const { return impl_->shape[i]; }
  int64_t rank() const { return impl_->shape.rank(); }
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  bool is_cpu() const { return impl_->storage->device.is_cpu(); }
  Layout layout() const { return impl_->layout; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // Host access: the buffer of a CPU tensor. On another device it throws, naming the call
  // (copy with .to(Device::cpu()) first).
  template <typename T> T* data() const {
    check_dtype(dtype_of<T>(), "data<T>()");
    check_host("data<T>()");
    return static_cast<T*>(raw());
  }
  template <typename T> std::span<T> span() const { return {data<T>(), static_cast<size_t>(numel())}; }
  // The buffer on its own device, for backends and kernels: no host check.
  void* raw() const { return impl_->storage->allocation->data(); }
  template <typename T> T* device_data() const {
    check_dtype(dtype_of<T>(), "device_data<T>()");
    return static_cast<T*>(raw());
  }

  // In-place version counter (shared with views): bumped by every in-place op.
  int64_t version() const { return impl_->storage->version; }
  void bump_version() { ++impl_->storage->version; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  bool same_storage(const Tensor& o) const { return impl_->storage == o.impl_->storage; }
  // No other Tensor refers to this one's data (through its handle or a view of its storage), so
  // writing it in place is seen by no one else.
  bool sole_reference() const { return impl_.use_count() == 1 && impl_->storage.use_count() == 1; }

  // A view with another shape over the same plain data (no copy).
  Tensor reshape(const Shape& shape) const;
  // The same data, shape and layout under a handle of its own with no autograd state (a
  // checkpoint segment's output, its recompute's inputs).
  Tensor detached() const;
  Tensor flatten(int64_t start_dim = 1) const;  // (N, ...) -> (N, prod(rest)); plain data only
  Tensor clone() const;                          // deep copy, same layout and device, current TagScope tag
  Tensor to_layout(Layout layout) const;         // reorder (a copy) or *this when already there
  Tensor to_plain() const { return to_layout(Layout::Plain); }
  Tensor to(DType dtype) const;                  // conversion copy
  Tensor to(Device device) const;                // copy to another device, or *this when already there
  std::vector<float> to_vector() const;          // logical NCHW order, any layout, f32/f64 data; CPU only
  float item() const;                            // CPU only

  // Autograd: leaves that require grad accumulate into grad().
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;
  void zero_grad();
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return impl_->meta; }
  std::shared_ptr<AutogradMeta>& autograd_meta() { return impl_->meta; }

  void check_dtype(DType expected, const char* where) const;
  // Throws "<where>: the tensor is on cuda:0; host access needs a CPU tensor (.to(Device::cpu()))".
  void check_host(const char* where) const {
    if (!is_cpu()) fail_not_host(where);
  }
  std::string describe() const;  // "(64, 3, 32, 32) f32 plain"

 private:
  [[noreturn]] void fail_not_host(const char* where) const;
  struct Impl {
    std::shared_ptr<Storage> storage;
    Shape shape;
    DType dtype = DType::f32;
    Layout layout = Layout::Plain;
    std::shared_ptr<AutogradMeta> meta;
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace packrat
