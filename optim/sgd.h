#pragma once
// SGD with momentum, dampening, Nesterov and (coupled) weight decay, exactly as torch.optim.SGD:
//   d = g + wd * p;  buf = d (first step) or momentum * buf + (1 - dampening) * d;
//   d = nesterov ? d + momentum * buf : buf;  p -= lr * d
// State: "momentum_buffer.<param>" when momentum != 0. A step updates the parameters of a device
// together (Backend::sgd_update_many: one launch on a GPU, PyTorch's fused SGD).
#include "optim/optimizer.h"

namespace packrat {

struct SgdOptions {
  double lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, const SgdOptions& o);
  const SgdOptions& options() const { return o_; }

 protected:
  void update(size_t i, Tensor& param, const Tensor& grad) override;
  // All due parameters of a device in one Backend::sgd_update_many call (one kernel on a GPU).
  void update_all(std::span<Due> due) override;
  std::vector<std::string> state_kinds() const override { return {"momentum_buffer"}; }

 public:
  std::string_view name() const override { return "sgd"; }

 private:
  SgdOptions o_;
};

}  // namespace packrat
