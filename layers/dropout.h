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
  uint64_t index() const { return stream_.index; }
  uint64_t calls() const { return stream_.calls; }
  void set_calls(uint64_t c) { stream_.calls = c; }  // to resume a checkpointed run
  // The Philox stream of the next training-mode call (counts the call): module index in the
  // high 24 bits, call count in the low 40. Also for ops that drop out inside (attention).
  uint64_t next_stream() { return (stream_.index << 40) | (stream_.calls++ & ((uint64_t{1} << 40) - 1)); }
  MaskStream& mask_stream() { return stream_; }  // for a module that holds a Dropout as a member

 protected:
  std::vector<std::pair<std::string, MaskStream*>> own_mask_streams() override { return {{"", &stream_}}; }

 private:
  float p_;
  MaskStream stream_;
};

}  // namespace packrat
