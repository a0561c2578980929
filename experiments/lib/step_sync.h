#pragma once
// What a data-parallel run adds to one training step (train_step calls it when
// StepOptions::sync is set; experiments/lib/distributed_run.h implements it over MPI).
#include <cstdint>

namespace packrat {

class SavedTensorStore;

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
  // An adaptive store refreshed its state on this rank's batch (GACT: its bits): make every rank
  // use rank 0's.
  virtual void after_store_refresh(SavedTensorStore& store) = 0;
};

}  // namespace packrat
