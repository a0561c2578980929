#include "optim/adamw.h"

#include <cmath>

#include "core/backend.h"

namespace packrat {

AdamW::AdamW(NamedTensors params, const AdamWOptions& o)
    : Optimizer(std::move(params), o.lr), o_(o), param_steps_(this->params().size(), 0) {
  PACKRAT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0,
                "AdamW: betas must be in [0, 1), got ({}, {})", o.beta1, o.beta2);
  PACKRAT_CHECK(o.eps >= 0.0 && o.weight_decay >= 0.0, "AdamW: eps {} and weight_decay {} must be >= 0", o.eps,
                o.weight_decay);
}

void AdamW::update(size_t i, Tensor& param, const Tensor& grad) {
  Tensor& m_t = state("exp_avg", i);
  Tensor& v_t = state("exp_avg_sq", i);
  if (!m_t.defined() || !v_t.defined()) {
    TagScope tag(MemTag::OptimizerState);
    m_t = new_state(i);
    v_t = new_state(i);
  }
  const int64_t t = ++param_steps_[i];
  const double rate = lr();
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t));
  Backend::AdamWStep st;
  st.decay = static_cast<float>(1.0 - rate * o_.weight_decay);
  st.beta1 = static_cast<float>(o_.beta1);
  st.beta2 = static_cast<float>(o_.beta2);
  st.step_size = static_cast<float>(rate / bc1);
  st.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  st.eps = static_cast<float>(o_.eps);
  check_same_device("adamw", {&param, &grad, &m_t, &v_t});
  backend_of(param).adamw_update(param, grad, m_t, v_t, st);
}

void AdamW::save_extra(NamedTensors& out) const {
  for (size_t i = 0; i < param_steps_.size(); ++i) {
    if (param_steps_[i] == 0) continue;
    // A host counter, on the CPU whatever device the parameters live on.
    Tensor t = Tensor::empty(Shape{}, DType::i64, Layout::Plain, MemTag::OptimizerState, Device::cpu());
    t.data<int64_t>()[0] = param_steps_[i];
    out.emplace_back("param_step." + params()[i].first, t);
  }
}

bool AdamW::load_extra(const std::string& name, const Tensor& t) {
  static const std::string prefix = "param_step.";
  if (name.rfind(prefix, 0) != 0) return false;
  PACKRAT_CHECK(t.defined() && t.dtype() == DType::i64 && t.numel() == 1,
                "optimizer state: '{}' must be one i64 value, got {}", name, t.describe());
  param_steps_[param_index(name.substr(prefix.size()))] = t.to(Device::cpu()).data<int64_t>()[0];
  return true;
}

}  // namespace packrat
