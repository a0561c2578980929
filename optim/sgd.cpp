#include "optim/sgd.h"

#include "core/parallel.h"

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
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  const int64_t n = param.numel();
  const float rate = static_cast<float>(lr()), wd = static_cast<float>(o_.weight_decay);
  const float mom = static_cast<float>(o_.momentum), damp = 1.0f - static_cast<float>(o_.dampening);
  if (o_.momentum == 0.0) {
    parallel_chunks(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) p[k] -= rate * (g[k] + wd * p[k]);
    });
    return;
  }
  Tensor& buf_t = state("momentum_buffer", i);
  const bool first = !buf_t.defined();
  if (first) {
    TagScope tag(MemTag::OptimizerState);
    buf_t = new_state(i);
  }
  float* buf = buf_t.data<float>();
  const bool nesterov = o_.nesterov;
  parallel_chunks(n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const float d = g[k] + wd * p[k];
      buf[k] = first ? d : mom * buf[k] + damp * d;
      p[k] -= rate * (nesterov ? d + mom * buf[k] : buf[k]);
    }
  });
  buf_t.bump_version();
}

}  // namespace packrat
