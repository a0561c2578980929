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
  check_same_device("sgd", {&param, &grad});
  Backend::SgdStep st{static_cast<float>(lr()), static_cast<float>(o_.weight_decay), static_cast<float>(o_.momentum),
                      static_cast<float>(o_.dampening), o_.nesterov, false};
  if (o_.momentum == 0.0) {
    Tensor none;
    backend_of(param).sgd_update(param, grad, none, st);
    return;
  }
  Tensor& buf = state("momentum_buffer", i);
  st.first = !buf.defined();
  if (st.first) {
    TagScope tag(MemTag::OptimizerState);
    buf = new_state(i);
  }
  backend_of(param).sgd_update(param, grad, buf, st);
}

}  // namespace packrat
