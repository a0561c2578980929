#pragma once
// Optimizers by name, as saved-tensor schemes are (quant/policy/rule_policy.h): sgd and adamw are
// registered on first use; a program may register its own before it runs the trainer. The
// config's optimizer.name is one of these names, and its optimizer.* keys fill OptimizerConfig.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/named_registry.h"
#include "optim/optimizer.h"

namespace packrat {

// The config's optimizer section; each optimizer reads the fields its OptimizerKind::keys name.
struct OptimizerConfig {
  std::string name = "sgd";
  double lr = 0.1;
  double momentum = 0.9;     // sgd
  bool nesterov = false;     // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
};

// A config value this optimizer cannot run with: the key to name and why.
struct OptimizerRefusal {
  std::string key, message;
};

struct OptimizerKind {
  // The optimizer.* keys it reads, in the order the resolved config writes them, each with its
  // default for this optimizer as YAML text ("0.1"); the config refuses the other optimizers' keys.
  std::vector<std::pair<std::string, std::string>> keys;
  std::function<std::unique_ptr<Optimizer>(NamedTensors params, const OptimizerConfig& c)> make;
  // Values that pass each key's own range but not together (sgd: nesterov without momentum).
  std::function<std::optional<OptimizerRefusal>(const OptimizerConfig& c)> check;
};

// The optimizers by name, in registration order: sgd, adamw, then yours
// (optimizers().add("lion", kind); .names(); .find(name), nullptr when unknown).
NamedRegistry<OptimizerKind>& optimizers();
// Throws naming optimizer.name when c.name is not registered.
std::unique_ptr<Optimizer> make_optimizer(NamedTensors params, const OptimizerConfig& c);

}  // namespace packrat
