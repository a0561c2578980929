#include "optim/registry.h"

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace packrat {

namespace {

std::unique_ptr<Optimizer> make_sgd(NamedTensors params, const OptimizerConfig& c) {
  SgdOptions o;
  o.lr = c.lr;
  o.momentum = c.momentum;
  o.nesterov = c.nesterov;
  o.weight_decay = c.weight_decay;
  return std::make_unique<SGD>(std::move(params), o);
}

std::unique_ptr<Optimizer> make_adamw(NamedTensors params, const OptimizerConfig& c) {
  AdamWOptions o;
  o.lr = c.lr;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.weight_decay = c.weight_decay;
  return std::make_unique<AdamW>(std::move(params), o);
}

}  // namespace

// Registration order is the order names are listed in messages ("sgd, adamw").
NamedRegistry<OptimizerKind>& optimizers() {
  static NamedRegistry<OptimizerKind> table([] {
    std::vector<std::pair<std::string, OptimizerKind>> t;
    t.push_back({"sgd",
                 {{{"lr", "0.1"}, {"momentum", "0.9"}, {"nesterov", "false"}, {"weight_decay", "0"}},
                  make_sgd,
                  [](const OptimizerConfig& c) -> std::optional<OptimizerRefusal> {
                    if (c.nesterov && c.momentum <= 0) return OptimizerRefusal{"nesterov", "nesterov needs momentum > 0"};
                    return std::nullopt;
                  }}});
    t.push_back({"adamw",
                 {{{"lr", "0.001"}, {"beta1", "0.9"}, {"beta2", "0.999"}, {"eps", "1e-08"}, {"weight_decay", "0.01"}},
                  make_adamw,
                  nullptr}});
    return t;
  }());
  return table;
}

std::unique_ptr<Optimizer> make_optimizer(NamedTensors params, const OptimizerConfig& c) {
  const OptimizerKind* kind = optimizers().find(c.name);
  if (kind == nullptr) fail("optimizer.name: is '{}', must be one of: {}", c.name, optimizers().joined_names());
  return kind->make(std::move(params), c);
}

}  // namespace packrat
