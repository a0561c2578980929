#include "core/tensor.h"

#include <atomic>
#include <cstring>

#include "core/autograd_meta.h"
#include "core/parallel.h"

namespace packrat {

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout) {
  return empty(shape, dtype, layout, TagScope::current());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Layout layout, MemTag tag) {
  for (int64_t d : shape.dims())
    PACKRAT_CHECK(d >= 0, "tensor: negative dimension in shape {}", shape.str());
  if (layout == Layout::nChw16c)
    PACKRAT_CHECK(shape.rank() == 4 && shape[1] % kChannelBlock == 0,
                  "tensor: layout nChw16c needs a 4-d shape with channels divisible by 16, got {}", shape.str());
  Tensor t;
  t.impl_ = std::make_shared<Impl>();
  static std::atomic<uint64_t> next_storage_id{1};
  t.impl_->storage = std::make_shared<Storage>();
  t.impl_->storage->id = next_storage_id++;
  t.impl_->storage->allocation =
      Allocator::cpu().allocate(static_cast<size_t>(shape.numel()) * dtype_size(dtype), tag);
  t.impl_->shape = shape;
  t.impl_->dtype = dtype;
  t.impl_->layout = layout;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Layout layout) {
  Tensor t = empty(shape, dtype, layout);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  PACKRAT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
                "tensor: {} values given for shape {} ({} elements)", values.size(), shape.str(), shape.numel());
  Tensor t = empty(shape);
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<double>& values) {
  PACKRAT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
                "tensor: {} values given for shape {} ({} elements)", values.size(), shape.str(), shape.numel());
  Tensor t = empty(shape, DType::f64);
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.layout()); }

Tensor Tensor::zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.layout()); }

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

Tensor Tensor::flatten(int64_t start_dim) const {
  std::vector<int64_t> dims(shape().dims().begin(), shape().dims().begin() + start_dim);
  int64_t rest = 1;
  for (int64_t i = start_dim; i < rank(); ++i) rest *= dim(i);
  dims.push_back(rest);
  return reshape(Shape(dims));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), layout());
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::to_layout(Layout target) const {
  if (target == layout()) return *this;
  PACKRAT_CHECK(rank() == 4, "to_layout: only 4-d tensors have a blocked layout, got {}", shape().str());
  Tensor out = empty(shape(), dtype(), target);
  const int64_t N = dim(0), C = dim(1), HW = dim(2) * dim(3), CB = C / kChannelBlock;
  const size_t es = dtype_size(dtype());
  const auto* src = static_cast<const char*>(raw());
  auto* dst = static_cast<char*>(out.raw());
  const bool to_blocked = target == Layout::nChw16c;
  // One (n, channel block) slab at a time: 16 planes of HW elements <-> HW groups of 16.
  parallel_for(0, N * CB, [&](int64_t nb) {
    const int64_t base = nb * kChannelBlock * HW;
    for (int64_t s = 0; s < HW; ++s)
      for (int64_t c = 0; c < kChannelBlock; ++c) {
        const int64_t plain = base + c * HW + s, blocked = base + s * kChannelBlock + c;
        const int64_t from = to_blocked ? plain : blocked, to = to_blocked ? blocked : plain;
        std::memcpy(dst + to * es, src + from * es, es);
      }
  });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, layout());
  const int64_t n = numel();
  auto convert = [&](auto* src) {
    auto go = [&](auto* dst) {
      using D = std::remove_pointer_t<decltype(dst)>;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
    };
    switch (target) {
      case DType::f32: go(out.data<float>()); break;
      case DType::f64: go(out.data<double>()); break;
      case DType::u8: go(out.data<uint8_t>()); break;
      case DType::i32: go(out.data<int32_t>()); break;
      case DType::i64: go(out.data<int64_t>()); break;
    }
  };
  switch (dtype()) {
    case DType::f32: convert(data<float>()); break;
    case DType::f64: convert(data<double>()); break;
    case DType::u8: convert(data<uint8_t>()); break;
    case DType::i32: convert(data<int32_t>()); break;
    case DType::i64: convert(data<int64_t>()); break;
  }
  return out;
}

std::vector<float> Tensor::to_vector() const {
  Tensor t = to_plain().to(DType::f32);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

float Tensor::item() const {
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
  return fmt::format("{} {} {}", shape().str(), dtype_name(dtype()), layout_name(layout()));
}

}  // namespace packrat
