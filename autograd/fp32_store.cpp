#include "autograd/fp32_store.h"

#include "core/autocast.h"
#include "core/backend.h"

namespace packrat {

// A 16-bit saved tensor (autocast) is read as the backend's kernels read it (kernel_operand); f'
// and the gradient are f32.
Tensor pointwise_derivative(const Pointwise& fn, const Tensor& saved_any) {
  const Tensor saved = kernel_operand(backend_of(saved_any), saved_any);
  return backend_of(saved).pointwise_derivative(fn.id, saved, fn.derivative_from_output != nullptr);
}

Tensor pointwise_backward(const Pointwise& fn, const Tensor& saved_any, const Tensor& grad_out) {
  const Tensor saved = kernel_operand(backend_of(saved_any), saved_any);
  const Tensor g = grad_out.to_layout(saved.layout());
  return backend_of(g).pointwise_backward(fn.id, saved, g, fn.derivative_from_output != nullptr);
}

SavedHandle Fp32Store::save(const Tensor& x, const SaveRequest& r) {
  const uint64_t key = x.storage()->id;
  Held& h = held_[key];
  const bool shared = h.refs > 0;
  if (!shared) {
    h.tensor = x;
    h.original_tag = x.storage()->allocation->tag();
    if (h.original_tag != MemTag::Parameter) x.storage()->allocation->retag(MemTag::Saved);
  }
  ++h.refs;
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{key, x.version(), r, x.shape(), x.dtype(), x.layout(), shared});
  return {this, id};
}

const Tensor& Fp32Store::checked(const Entry& e) const {
  const Tensor& held = held_.at(e.key).tensor;
  if (held.version() != e.version)
    fail("{} {}: a tensor saved for backward was modified in place after it was saved (version {}, saved at {}); "
         "use an out-of-place op",
         e.request.op, e.request.name, held.version(), e.version);
  return held;
}

Tensor Fp32Store::apply_derivative(const SavedHandle& handle, const Tensor& grad_out) {
  auto it = entries_.find(handle.id);
  PACKRAT_CHECK(it != entries_.end(), "fp32 store: saved tensor {} was already released (a second backward?)",
                handle.id);
  const Entry& e = it->second;
  if (e.request.need != Need::Derivative || grad_out.dtype() != DType::f32 || !is_f32_or_half(e.dtype))
    return SavedTensorStore::apply_derivative(handle, grad_out);
  const Tensor& held = checked(e);
  PACKRAT_CHECK(grad_out.numel() == held.numel(), "{} {}: gradient {} does not match the saved tensor {}",
                e.request.op, e.request.name, grad_out.shape().str(), e.shape.str());
  check_same_device(e.request.op, {&held, &grad_out});
  return pointwise_backward(*e.request.fn, held, grad_out);
}

Tensor Fp32Store::load(const SavedHandle& handle) {
  auto it = entries_.find(handle.id);
  PACKRAT_CHECK(it != entries_.end(), "fp32 store: saved tensor {} was already released (a second backward?)",
                handle.id);
  const Entry& e = it->second;
  const Tensor& held = checked(e);
  Tensor t = held.shape() == e.shape ? held : held.reshape(e.shape);
  if (e.request.need == Need::Derivative) {
    PACKRAT_CHECK(e.request.fn, "{} {}: derivative requested without a function", e.request.op, e.request.name);
    return pointwise_derivative(*e.request.fn, t);
  }
  return t;
}

void Fp32Store::release(const SavedHandle& handle) {
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return;
  auto hit = held_.find(it->second.key);
  if (--hit->second.refs == 0) {
    // Still used elsewhere (e.g. the forward output the caller holds): back to its own account.
    // (Not an offloaded copy: the offload layer gave the buffer its tag back when it moved it.)
    const Tensor& t = hit->second.tensor;
    if (t.storage()->id == hit->first) t.storage()->allocation->retag(hit->second.original_tag);
    held_.erase(hit);
  }
  entries_.erase(it);
}

void Fp32Store::describe(std::vector<SavedRecord>& out) const {
  for (const auto& [id, e] : entries_) {
    const Held& h = held_.at(e.key);
    if (h.original_tag == MemTag::Parameter) continue;  // the parameter itself: no extra memory
    SavedRecord rec;
    rec.layer = e.request.name;
    rec.op = std::string(e.request.op);
    rec.scheme = "fp32";
    rec.need = e.request.need;
    rec.bits = 8.0 * static_cast<double>(dtype_size(e.dtype));
    rec.numel = e.shape.numel();
    rec.shape = e.shape;
    rec.dtype = e.dtype;
    rec.fp32_bytes = e.shared ? 0 : rec.numel * static_cast<int64_t>(dtype_size(e.dtype));  // once, at its first save
    rec.f32_bytes = is_half(e.dtype) ? 2 * rec.fp32_bytes : rec.fp32_bytes;
    rec.shared = e.shared;
    rec.statistics = e.request.exact;
    rec.bytes = e.shared ? 0 : static_cast<int64_t>(h.tensor.storage()->allocation->bytes());
    rec.fp32_key = e.key;
    out.push_back(std::move(rec));
  }
}

void Fp32Store::payload(const SavedHandle& handle, std::vector<PayloadSlot>& out) {
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return;
  Held& h = held_.at(it->second.key);
  if (h.original_tag == MemTag::Parameter) return;  // the model's own memory: never moved
  out.push_back({&h.tensor, h.original_tag});
}

}  // namespace packrat
