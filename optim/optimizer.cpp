#include "optim/optimizer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/backend.h"

namespace packrat {

Optimizer::Optimizer(NamedTensors params, double lr) : params_(std::move(params)), lr_(lr) {
  std::set<std::string> seen;
  for (const auto& [name, p] : params_) {
    PACKRAT_CHECK(p.defined() && p.dtype() == DType::f32, "optimizer: parameter '{}' must be a defined f32 tensor",
                  name);
    PACKRAT_CHECK(seen.insert(name).second, "optimizer: parameter name '{}' appears twice", name);
  }
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  PACKRAT_CHECK(std::isfinite(lr) && lr >= 0.0, "optimizer: learning rate must be finite and >= 0, got {}", lr);
  lr_ = lr;
}

Tensor& Optimizer::state(const std::string& kind, size_t i) {
  auto& v = state_[kind];
  if (v.size() != params_.size()) v.resize(params_.size());
  return v[i];
}

Tensor Optimizer::new_state(size_t i) const {
  const Tensor& p = params_[i].second;
  Tensor s = Tensor::empty(p.shape(), DType::f32, p.layout(), TagScope::current(), p.device());  // beside p
  backend_of(s).fill(s, 0.0);
  return s;
}

void Optimizer::step() {
  std::vector<Due> due;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    PACKRAT_CHECK(g.shape() == p.shape(), "optimizer: gradient of '{}' has shape {}, the parameter {}",
                  params_[i].first, g.shape().str(), p.shape().str());
    if (g.layout() != p.layout()) g = g.to_layout(p.layout());
    due.push_back({i, &p, g});
  }
  update_all(due);
  for (Due& d : due) d.param->bump_version();
  ++steps_;
}

void Optimizer::update_all(std::span<Due> due) {
  for (Due& d : due) update(d.index, *d.param, d.grad);
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

size_t Optimizer::param_index(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) return i;
  fail("optimizer: no parameter named '{}'", name);
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (const std::string& kind : state_kinds()) {
    auto it = state_.find(kind);
    if (it == state_.end()) continue;
    for (size_t i = 0; i < it->second.size(); ++i)
      if (it->second[i].defined()) out.emplace_back(kind + "." + params_[i].first, it->second[i]);
  }
  save_extra(out);
  // A host counter, on the CPU whatever device the parameters live on.
  Tensor step = Tensor::empty(Shape{}, DType::i64, Layout::Plain, MemTag::OptimizerState, Device::cpu());
  step.data<int64_t>()[0] = steps_;
  out.emplace_back("step", step);
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  const std::vector<std::string> kinds = state_kinds();
  std::map<std::string, std::vector<Tensor>> loaded;
  int64_t steps = -1;
  clear_extra();
  for (const auto& [name, t] : state) {
    if (name == "step") {
      PACKRAT_CHECK(t.defined() && t.dtype() == DType::i64 && t.numel() == 1,
                    "optimizer state: 'step' must be one i64 value, got {}", t.describe());
      steps = t.to(Device::cpu()).data<int64_t>()[0];
      continue;
    }
    if (load_extra(name, t)) continue;
    const size_t dot = name.find('.');
    const std::string kind = dot == std::string::npos ? name : name.substr(0, dot);
    // Another optimizer's state (an SGD run resumed with optimizer.name: adamw) is named as such.
    PACKRAT_CHECK(dot != std::string::npos && std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
                  "optimizer state: entry '{}' is not state of optimizer.name {} (which keeps {}): it was written by "
                  "another optimizer; set optimizer.name to the one the run was started with",
                  name, this->name(), fmt::join(kinds, ", "));
    auto it = index.find(name.substr(dot + 1));
    PACKRAT_CHECK(it != index.end(), "optimizer state: entry '{}' names no parameter of this optimizer", name);
    const Tensor& p = params_[it->second].second;
    PACKRAT_CHECK(t.defined() && t.shape() == p.shape() && t.dtype() == DType::f32,
                  "optimizer state: entry '{}' is {}, the parameter is {} f32", name, t.describe(), p.shape().str());
    auto& v = loaded[kind];
    v.resize(params_.size());
    TagScope tag(MemTag::OptimizerState);
    Tensor copy = Tensor::empty(p.shape(), DType::f32, p.layout(), MemTag::OptimizerState, p.device());
    const Tensor src = t.to(p.device()).to_layout(p.layout());  // from a checkpoint: a host tensor
    backend_of(copy).copy(src, copy);
    v[it->second] = copy;
  }
  PACKRAT_CHECK(steps >= 0, "optimizer state: the 'step' entry is missing");
  state_ = std::move(loaded);
  steps_ = steps;
}

}  // namespace packrat
