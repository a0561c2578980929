#pragma once
// AdamW exactly as torch.optim.AdamW (amsgrad off): per parameter, with t its own step count,
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// State: "exp_avg.<param>", "exp_avg_sq.<param>" and "param_step.<param>" (i64 scalar).
#include <cstdint>
#include <vector>

#include "optim/optimizer.h"

namespace packrat {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedTensors params, const AdamWOptions& o);
  const AdamWOptions& options() const { return o_; }
  std::string_view name() const override { return "adamw"; }

 protected:
  void update(size_t i, Tensor& param, const Tensor& grad) override;
  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  void save_extra(NamedTensors& out) const override;
  bool load_extra(const std::string& name, const Tensor& t) override;
  void clear_extra() override { param_steps_.assign(param_steps_.size(), 0); }

 private:
  AdamWOptions o_;
  std::vector<int64_t> param_steps_;
};

}  // namespace packrat
