#pragma once
// Dynamic loss scaling for fp16 (PyTorch's torch.cuda.amp.GradScaler, its defaults): the loss is multiplied
// by the scale before backward, the gradients divided by it after; a step whose gradients hold an inf or a
// NaN is skipped (no optimizer update) and the scale multiplied by backoff_factor; after growth_interval good
// steps in a row it is multiplied by growth_factor. Its state (scale, good steps in a row, steps skipped)
// goes into the checkpoint, so a resumed run scales exactly as the uninterrupted one.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace packrat {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // good steps since the last change
  int64_t skipped() const { return skipped_; }                // steps skipped so far
  // loss * scale (an op: backward through it gives the scaled gradients).
  Tensor scale_loss(const Tensor& loss) const;
  // Divides the gradient of every parameter by the scale; false when one of them holds an inf or a NaN (the
  // step must then be skipped: update(true)).
  bool unscale(const std::vector<Tensor>& params) const;
  // After a step: found_inf backs the scale off and counts a skipped step; otherwise a good step, which grows
  // the scale at growth_interval.
  void update(bool found_inf);

  // For the checkpoint: (scale) and (growth_tracker, skipped).
  void restore(double scale, int64_t growth_tracker, int64_t skipped);

 private:
  GradScalerOptions o_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
};

}  // namespace packrat
