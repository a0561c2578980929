#pragma once
// What a data-parallel run adds to one training step (train_step calls it when
// StepOptions::sync is set; experiments/lib/distributed_run.h implements it over MPI).
#include <cstdint>

namespace packrat {

class GactStore;

class StepSync {
 public:
  virtual ~StepSync() = default;
  // After the forward, before the backward: this rank trains on `local` of the global batch's
  // `global` samples (its gradients weigh local / global).
  virtual void before_backward(int64_t local, int64_t global) = 0;
  // After the backward: every parameter's gradient is the global batch's, identical on every rank.
  virtual void after_backward() = 0;
  // The step failed between the two.
  virtual void abandon() = 0;
  // GACT refreshed its bits on this rank's batch: make every rank use rank 0's decision.
  virtual void after_gact_refresh(GactStore& store) = 0;
};

}  // namespace packrat
