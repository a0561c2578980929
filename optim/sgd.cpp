#include "optim/sgd.h"

#include "core/backend.h"

namespace packrat {

SGD::SGD(NamedTensors params, const SgdOptions& o) : Optimizer(std::move(params), o.lr), o_(o) {
  PACKRAT_CHECK(o.momentum >= 0.0 && o.weight_decay >= 0.0 && o.dampening >= 0.0,
                "SGD: momentum {}, dampening {} and weight_decay {} must be >= 0", o.momentum, o.dampening,
                o.weight_decay);
  PACKRAT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
                "SGD: Nesterov momentum needs momentum > 0 and dampening 0 (got momentum {}, dampening {})",
                o.momentum, o.dampening);
}

void SGD::update(size_t i, Tensor& param, const Tensor& grad) {
  Due one{i, &param, grad};
  update_all(std::span<Due>(&one, 1));
}

void SGD::update_all(std::span<Due> due) {
  const Backend::SgdStep st{static_cast<float>(lr()), static_cast<float>(o_.weight_decay),
                            static_cast<float>(o_.momentum), static_cast<float>(o_.dampening), o_.nesterov, false};
  std::vector<Backend::SgdOperands> operands;  // in the parameters' order
  operands.reserve(due.size());
  for (Due& d : due) {
    check_same_device("sgd", {d.param, &d.grad});
    Tensor* buf = nullptr;
    bool first = false;
    if (o_.momentum != 0.0) {
      buf = &state("momentum_buffer", d.index);  // stable: the state vector is sized once
      first = !buf->defined();
      if (first) {
        TagScope tag(MemTag::OptimizerState);
        *buf = new_state(d.index);
      }
    }
    operands.push_back({d.param, &d.grad, buf, first});
  }
  // One call per device, each with its parameters in order.
  std::vector<bool> done(operands.size(), false);
  for (size_t i = 0; i < operands.size(); ++i) {
    if (done[i]) continue;
    const Device device = operands[i].param->device();
    std::vector<Backend::SgdOperands> same;
    for (size_t j = i; j < operands.size(); ++j)
      if (!done[j] && operands[j].param->device() == device) {
        same.push_back(operands[j]);
        done[j] = true;
      }
    backend(device).sgd_update_many(same, st);
  }
}

}  // namespace packrat
