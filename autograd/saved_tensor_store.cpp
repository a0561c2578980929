#include "autograd/saved_tensor_store.h"

#include <unordered_set>

#include "autograd/fp32_store.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat {

Tensor SavedTensorStore::load_in(const SavedHandle& h, DType dtype) {
  Tensor t = load(h);
  return t.dtype() == dtype ? t : t.to(dtype);
}

std::string_view need_name(Need n) {
  switch (n) {
    case Need::Value: return "value";
    case Need::Derivative: return "derivative";
    case Need::Mask: return "mask";
    case Need::Index: return "index";
  }
  return "?";
}

Tensor multiply_elementwise(const Tensor& grad_out, const Tensor& d) {
  PACKRAT_CHECK(grad_out.shape() == d.shape(), "backward: gradient {} and saved derivative {} differ in shape",
                grad_out.shape().str(), d.shape().str());
  check_same_device("backward", {&grad_out, &d});
  Backend& b = backend_of(grad_out);
  Tensor dd = d.to_layout(grad_out.layout());
  if (grad_out.dtype() == DType::f64) return b.binary(BinaryOp::Mul, grad_out, dd.to(DType::f64));
  if (dd.dtype() == DType::u8) return b.mask_scale(grad_out, dd, 1.0f);
  return b.binary(BinaryOp::Mul, grad_out, dd);
}

std::pair<Tensor, SavedHandle> SavedTensorStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(r.fn != nullptr, "{} {}: a pointwise save needs the function", r.op, r.name);
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{} {}: pointwise forward expects f32, bf16 or f16, got {}", r.op, r.name,
                x.describe());
  // 16-bit x (autocast): f in f32, y in x's dtype; what is saved is in it too.
  Backend& be = backend_of(x);
  Tensor y = in_dtype(be.pointwise_forward(r.fn->id, kernel_operand(be, x)), x.dtype());
  return {y, save(r.fn->derivative_from_output ? y : x, r)};
}

Tensor SavedTensorStore::apply_derivative(const SavedHandle& h, const Tensor& grad_out) {
  return multiply_elementwise(grad_out, load(h));
}

std::vector<SavedTensorStore*> stateful_stores(StorePolicy& p) {
  std::vector<SavedTensorStore*> out;
  for (SavedTensorStore* s : p.stores())
    if (!s->state_name().empty()) out.push_back(s);
  return out;
}

std::vector<SavedRecord> StorePolicy::describe() {
  std::vector<SavedRecord> out;
  for (auto* s : stores()) s->describe(out);
  std::unordered_set<uint64_t> seen;
  for (auto& r : out)
    if (r.fp32_key != 0 && !seen.insert(r.fp32_key).second) r.fp32_bytes = r.f32_bytes = 0;
  return out;
}

namespace {
thread_local StorePolicy* t_policy = nullptr;
}

StorePolicy& current_policy() {
  if (t_policy) return *t_policy;
  thread_local Fp32Policy fp32;
  return fp32;
}

PolicyScope::PolicyScope(StorePolicy& p) : previous_(t_policy) { t_policy = &p; }
PolicyScope::~PolicyScope() { t_policy = previous_; }

SavedHandle save_for_backward(const Tensor& x, const SaveRequest& r) {
  if (x.storage()->allocation->tag() == MemTag::Parameter) {
    thread_local Fp32Store parameters;
    return parameters.save(x, r);
  }
  return current_policy().store_for(r).save(x, r);
}

}  // namespace packrat
