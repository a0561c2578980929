#include "optim/registry.h"

#include <deque>
#include <mutex>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace packrat {

namespace {

std::mutex g_optimizers_mutex;

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

// Registration order is the order names are listed in messages ("sgd, adamw").
std::deque<std::pair<std::string, OptimizerKind>>& optimizers() {  // callers hold g_optimizers_mutex
  static std::deque<std::pair<std::string, OptimizerKind>> table = [] {
    std::deque<std::pair<std::string, OptimizerKind>> t;
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
  }();
  return table;
}

}  // namespace

void register_optimizer(const std::string& name, OptimizerKind kind) {
  std::lock_guard lock(g_optimizers_mutex);
  for (auto& [n, k] : optimizers())
    if (n == name) {
      k = std::move(kind);
      return;
    }
  optimizers().push_back({name, std::move(kind)});
}

std::vector<std::string> optimizer_names() {
  std::lock_guard lock(g_optimizers_mutex);
  std::vector<std::string> out;
  for (const auto& [name, k] : optimizers()) out.push_back(name);
  return out;
}

const OptimizerKind* find_optimizer(const std::string& name) {
  std::lock_guard lock(g_optimizers_mutex);
  for (const auto& [n, k] : optimizers())
    if (n == name) return &k;
  return nullptr;
}

std::unique_ptr<Optimizer> make_optimizer(NamedTensors params, const OptimizerConfig& c) {
  const OptimizerKind* kind = find_optimizer(c.name);
  if (kind == nullptr) {
    std::string known;
    for (const auto& n : optimizer_names()) known += (known.empty() ? "" : ", ") + n;
    fail("optimizer.name: is '{}', must be one of: {}", c.name, known);
  }
  return kind->make(std::move(params), c);
}

}  // namespace packrat
