#include "core/autocast.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace packrat {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "?";
}

std::optional<Precision> precision_from_name(std::string_view name) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
    if (precision_name(p) == name) return p;
  return std::nullopt;
}

DType precision_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

namespace {
thread_local DType t_autocast = DType::f32;

bool tf32_from_environment() {
  const char* v = std::getenv("PACKRAT_CUDA_TF32");
  return v && std::string(v) == "1";
}
std::atomic<bool> g_tf32_convolutions{tf32_from_environment()}, g_tf32_matmuls{tf32_from_environment()};
thread_local bool t_tf32_for_half_operands = false;
}  // namespace

Tf32Use tf32_use() {
  const bool half_operands = t_tf32_for_half_operands;
  return Tf32Use{half_operands || g_tf32_convolutions.load(), half_operands || g_tf32_matmuls.load()};
}

Tf32ForHalfOperands::Tf32ForHalfOperands(bool open) : previous_(t_tf32_for_half_operands) {
  t_tf32_for_half_operands = previous_ || open;
}
Tf32ForHalfOperands::~Tf32ForHalfOperands() { t_tf32_for_half_operands = previous_; }
void set_tf32_use(Tf32Use use) {
  g_tf32_convolutions = use.convolutions;
  g_tf32_matmuls = use.matmuls;
}

DType autocast_dtype() { return t_autocast; }

AutocastScope::AutocastScope(DType compute) : previous_(t_autocast) { t_autocast = compute; }
AutocastScope::~AutocastScope() { t_autocast = previous_; }

Tensor autocast_operand(const Tensor& t) {
  if (!t.defined() || t_autocast == DType::f32 || !is_floating(t.dtype())) return t;
  return t.to(t_autocast);
}

Tensor as_f32(const Tensor& t) { return t.defined() && is_half(t.dtype()) ? t.to(DType::f32) : t; }

Tensor in_dtype(const Tensor& y, DType dtype) { return is_half(dtype) && y.dtype() != dtype ? y.to(dtype) : y; }

Tensor at_kernel_edge(const Tensor& t, DType data, DType kernel) { return t.to(data).to(kernel); }

DType result_dtype(std::initializer_list<const Tensor*> inputs) {
  DType half = DType::f32;
  for (const Tensor* t : inputs) {
    if (!t || !t->defined() || !is_floating(t->dtype())) continue;
    if (!is_half(t->dtype())) return t->dtype();
    half = t->dtype();
  }
  return half;
}

}  // namespace packrat
