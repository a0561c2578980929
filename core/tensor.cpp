#include "core/tensor.h"

#include <atomic>
#include <cstring>

#include "core/autograd_meta.h"
#include "core/backend.h"

namespace packrat {

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout) {
  return empty(shape, dtype, layout, TagScope::current(), DeviceScope::current());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout, MemTag tag) {
  return empty(shape, dtype, layout, tag, DeviceScope::current());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout, MemTag tag, Device device) {
  return empty_in(Allocator::of(device), shape, dtype, layout, tag);
}

Tensor Tensor::empty_in(Allocator& allocator, const Shape& shape, DType dtype, Layout layout, MemTag tag) {
  const Device device = allocator.device();
  for (int64_t d : shape.dims())
    PACKRAT_CHECK(d >= 0, "tensor: negative dimension in shape {}", shape.str());
  if (const int64_t block = channel_block(layout))
    PACKRAT_CHECK(shape.rank() == 4 && shape[1] % block == 0,
                  "tensor: layout {} needs a 4-d shape with channels divisible by {}, got {}", layout_name(layout),
                  block, shape.str());
  if (layout == Layout::NHWC)
    PACKRAT_CHECK(shape.rank() == 4, "tensor: layout NHWC needs a 4-d shape, got {}", shape.str());
  Tensor t;
  t.impl_ = std::make_shared<Impl>();
  static std::atomic<uint64_t> next_storage_id{1};
  t.impl_->storage = std::make_shared<Storage>();
  t.impl_->storage->id = next_storage_id++;
  t.impl_->storage->device = device;
  t.impl_->storage->allocation =
      allocator.allocate(static_cast<size_t>(shape.numel()) * dtype_size(dtype), tag);
  t.impl_->shape = shape;
  t.impl_->dtype = dtype;
  t.impl_->layout = layout;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Layout layout) {
  Tensor t = empty(shape, dtype, layout);
  backend_of(t).fill(t, 0.0);
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  backend_of(t).fill(t, value);
  return t;
}

namespace {
template <typename T>
Tensor from_host(const Shape& shape, const std::vector<T>& values) {
  PACKRAT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
                "tensor: {} values given for shape {} ({} elements)", values.size(), shape.str(), shape.numel());
  Tensor host = Tensor::empty(shape, dtype_of<T>(), Layout::Plain, TagScope::current(), Device::cpu());
  std::memcpy(host.raw(), values.data(), host.nbytes());
  return host.to(DeviceScope::current());
}
}  // namespace

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) { return from_host(shape, values); }

Tensor Tensor::from_vector(const Shape& shape, const std::vector<double>& values) { return from_host(shape, values); }

Tensor Tensor::empty_like(const Tensor& t) {
  return empty(t.shape(), t.dtype(), t.layout(), TagScope::current(), t.device());
}

Tensor Tensor::zeros_like(const Tensor& t) {
  Tensor z = empty_like(t);
  backend_of(z).fill(z, 0.0);
  return z;
}

Tensor Tensor::reshape(const Shape& shape) const {
  PACKRAT_CHECK(shape.numel() == numel(), "reshape: cannot view {} ({} elements) as {}", this->shape().str(), numel(),
                shape.str());
  Tensor src = layout() == Layout::Plain ? *this : to_plain();
  Tensor t;
  t.impl_ = std::make_shared<Impl>(*src.impl_);
  t.impl_->shape = shape;
  t.impl_->meta = nullptr;
  return t;
}

Tensor Tensor::detached() const {
  Tensor t;
  t.impl_ = std::make_shared<Impl>(*impl_);
  t.impl_->meta = nullptr;
  return t;
}

Tensor Tensor::flatten(int64_t start_dim) const {
  std::vector<int64_t> dims(shape().dims().begin(), shape().dims().begin() + start_dim);
  int64_t rest = 1;
  for (int64_t i = start_dim; i < rank(); ++i) rest *= dim(i);
  dims.push_back(rest);
  return reshape(Shape(dims));
}

Tensor Tensor::clone() const {
  Tensor t = empty_like(*this);
  backend_of(t).copy(*this, t);
  return t;
}

Tensor Tensor::to_layout(Layout target) const {
  if (target == layout()) return *this;
  PACKRAT_CHECK(rank() == 4, "to_layout: only 4-d tensors have a blocked layout, got {}", shape().str());
  return backend_of(*this).to_layout(*this, target);
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, layout(), TagScope::current(), device());
  backend_of(out).convert(*this, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  // A layout of the source device's own (NHWC on a GPU) becomes plain before it leaves.
  if (layout() == Layout::NHWC) return to_plain().to(target);
  Tensor out = empty(shape(), dtype(), layout(), TagScope::current(), target);
  // The non-CPU side's backend knows how to move bytes to and from the host.
  backend(target.is_cpu() ? device() : target).copy(*this, out);
  return out;
}

std::vector<float> Tensor::to_vector() const {
  check_host("to_vector()");
  Tensor t = to_plain().to(DType::f32);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

float Tensor::item() const {
  check_host("item()");
  PACKRAT_CHECK(numel() == 1, "item: tensor of shape {} has {} elements, not one", shape().str(), numel());
  return to_vector()[0];
}

bool Tensor::requires_grad() const { return impl_ && impl_->meta && impl_->meta->requires_grad; }

Tensor& Tensor::set_requires_grad(bool on) {
  if (!impl_->meta) impl_->meta = std::make_shared<AutogradMeta>();
  impl_->meta->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl_->meta ? impl_->meta->grad : Tensor(); }

void Tensor::zero_grad() {
  if (impl_->meta) impl_->meta->grad = Tensor();
}

void Tensor::check_dtype(DType expected, const char* where) const {
  PACKRAT_CHECK(dtype() == expected, "{}: tensor has dtype {}, expected {}", where, dtype_name(dtype()),
                dtype_name(expected));
}

std::string Tensor::describe() const {
  if (!defined()) return "(undefined tensor)";
  if (is_cpu()) return fmt::format("{} {} {}", shape().str(), dtype_name(dtype()), layout_name(layout()));
  return fmt::format("{} {} {} on {}", shape().str(), dtype_name(dtype()), layout_name(layout()), device().str());
}

void Tensor::fail_not_host(const char* where) const {
  fail("{}: the tensor is on {}; host access needs a CPU tensor (.to(Device::cpu()) first)", where, device().str());
}

}  // namespace packrat
