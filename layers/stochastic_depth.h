#pragma once
// torchvision.ops.StochasticDepth(p, mode="row"): drops a whole sample's residual branch with
// probability p in training (survivors scaled by 1 / (1 - p)), identity in eval. Reproducible as
// Dropout (layers/dropout.h): Philox keyed by the run's dropout seed and a stream made of this
// module's index (a process-wide counter of StochasticDepth modules, so a model built in the same
// order gets the same indices) and the number of training forwards it has made.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class StochasticDepth : public Module {
 public:
  explicit StochasticDepth(float p);
  Tensor forward(const Tensor& x) override;  // (N, ...) -> same shape and layout

  float p() const { return p_; }
  uint64_t calls() const { return stream_.calls; }
  void set_calls(uint64_t c) { stream_.calls = c; }  // to resume a checkpointed run

 protected:
  std::vector<std::pair<std::string, MaskStream*>> own_mask_streams() override { return {{"", &stream_}}; }

 private:
  float p_;
  MaskStream stream_;
};

}  // namespace packrat
