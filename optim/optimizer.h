#pragma once
// Optimizer base: named parameters, in-place updates (bumping each parameter's version),
// per-parameter state tensors allocated under MemTag::OptimizerState, and a state dict of
// named tensors for checkpoints: "<kind>.<param name>" (e.g. "momentum_buffer.fc.weight")
// plus "step", the number of step() calls (an i64 scalar).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace packrat {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  // Parameters with names (Module::named_parameters()); names must be unique.
  Optimizer(NamedTensors params, double lr);
  virtual ~Optimizer() = default;

  // One update from the parameters' accumulated gradients; parameters without one are skipped.
  void step();
  void zero_grad();  // drops every parameter's gradient

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t steps() const { return steps_; }
  const NamedTensors& params() const { return params_; }
  virtual std::string_view name() const = 0;  // "sgd", "adamw": the config's optimizer.name

  NamedTensors state_dict() const;
  // Restores a state dict from state_dict() of an optimizer of the same kind over parameters
  // with the same names and shapes; throws naming the first entry that does not fit.
  void load_state_dict(const NamedTensors& state);

 protected:
  // Updates parameter i in place from its gradient g (f32, same shape and layout).
  virtual void update(size_t i, Tensor& param, const Tensor& grad) = 0;
  // A parameter that has a gradient this step: its index, itself, the gradient in its layout.
  struct Due {
    size_t index;
    Tensor* param;
    Tensor grad;
  };
  // Updates every due parameter in place (step() then bumps their versions). Default: update() on
  // each; an optimizer whose backend steps many tensors in one launch overrides it (SGD).
  virtual void update_all(std::span<Due> due);
  // The state kinds this optimizer keeps per parameter, e.g. {"momentum_buffer"}.
  virtual std::vector<std::string> state_kinds() const = 0;
  // State tensor `kind` of parameter i, or an undefined tensor before its first update.
  Tensor& state(const std::string& kind, size_t i);
  // A new zero state tensor shaped like parameter i, tagged OptimizerState.
  Tensor new_state(size_t i) const;
  // State that is not one tensor per kind and parameter (e.g. AdamW's per-parameter step
  // counts): appended to / recognised in state dicts by the subclass.
  virtual void save_extra(NamedTensors& out) const {}
  virtual bool load_extra(const std::string& name, const Tensor& t) { return false; }
  virtual void clear_extra() {}  // called before loading a state dict
  size_t param_index(const std::string& name) const;  // throws when unknown

 private:
  NamedTensors params_;
  double lr_;
  int64_t steps_ = 0;
  std::map<std::string, std::vector<Tensor>> state_;  // kind -> per-parameter tensor
};

}  // namespace packrat
