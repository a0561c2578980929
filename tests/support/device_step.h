#pragma once
// One training step of a model on a device, with what it produced brought to the host, so that a
// step on a GPU (or the emulated GPU, tests/support/emulated_gpu.h) can be compared with the
// same step on the CPU: the loss, every parameter gradient, and what the FP32 store held.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "models/registry.h"
#include "quant/policy/rule_policy.h"

namespace packrat::testing {

struct DeviceStep {
  double loss = 0;
  std::vector<std::pair<std::string, std::vector<float>>> grads;  // (name, gradient in NCHW order), host
  std::vector<SavedRecord> saved;                                 // held by the FP32 store after the forward
};

// The model of `spec` (seeded: the same initial weights on every device), built on `device`, one
// forward + backward on the synthetic batch (n, c, h, w) of seed `seed` (made on the host, copied
// to the device). Leaves no gradient or saved tensor behind.
inline DeviceStep device_step(const ModelSpec& spec, Device device, int64_t n, int64_t c, int64_t h, int64_t w,
                              uint64_t seed = 5) {
  DeviceScope on(device);
  std::shared_ptr<Module> model = make_model(spec);
  StorePolicySpec fp32;
  fp32.seed = spec.seed;
  RulePolicy policy(fp32);
  PolicyScope scope(policy);
  policy.begin_step(0);
  model->train();
  const SyntheticBatch b = synthetic_batch(n, c, h, w, spec.num_classes, seed);
  DeviceStep r;
  {
    TagScope tag(MemTag::Activation);
    const Tensor loss = task_loss((*model)(b.images.to(device)), b.labels.to(device), 0.0f);
    r.loss = loss.to(Device::cpu()).item();
    r.saved = policy.describe();
    backward(loss);
  }
  for (auto& [name, p] : model->named_parameters()) {
    r.grads.emplace_back(name, p.grad().to(Device::cpu()).to_vector());
    p.zero_grad();
  }
  return r;
}

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

}  // namespace packrat::testing
