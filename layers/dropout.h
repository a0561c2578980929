#pragma once
// nn.Dropout (inverted). Reproducible: each Dropout draws its mask from Philox keyed by the
// global dropout seed and a stream made of the module's index (taken from a process-wide
// counter at construction, so a model built in the same order gets the same indices) and the
// number of forward calls it has made in training mode.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

// The run seed for every Dropout (default 0). Set it before training.
void set_dropout_seed(uint64_t seed);
uint64_t dropout_seed();

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);
  Tensor forward(const Tensor& x) override;  // identity in eval mode or with p = 0

  float p() const { return p_; }
  uint64_t index() const { return index_; }
  uint64_t calls() const { return calls_; }
  void set_calls(uint64_t c) { calls_ = c; }  // to resume a checkpointed run
  // The Philox stream of the next training-mode call (counts the call): module index in the
  // high 24 bits, call count in the low 40. Also for ops that drop out inside (attention).
  uint64_t next_stream() { return (index_ << 40) | (calls_++ & ((uint64_t{1} << 40) - 1)); }

 private:
  float p_;
  uint64_t index_, calls_ = 0;
};

}  // namespace packrat
