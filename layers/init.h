#pragma once
// Parameter initialisation, as PyTorch's torch.nn.init, drawing from Philox so that a model
// built twice with the same seed is identical. Each layer receives its own seed; a model hands
// out per-layer seeds with SeedSequence.
#include <cstdint>

#include "core/philox.h"
#include "core/tensor.h"

namespace packrat::init {

// fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field (PyTorch's
// _calculate_fan_in_and_fan_out for weights of rank >= 2).
int64_t fan_in(const Shape& s);
int64_t fan_out(const Shape& s);

// Fills are parallel and deterministic: element i, in logical (plain) order whatever t's layout,
// draws from Philox block (counter + i / 4) of rng's (seed, stream); rng is advanced past the
// blocks used. So a weight kept in a GPU's KRSC layout holds the CPU's values.
void uniform(Tensor& t, float lo, float hi, PhiloxStream& rng);  // f32, any layout
void normal(Tensor& t, float mean, float std, PhiloxStream& rng);
void constant(Tensor& t, float value);

// nn.Conv2d / nn.Linear default: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_weight(Tensor& w, PhiloxStream& rng);
// The matching bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in.
void default_bias(Tensor& b, int64_t weight_fan_in, PhiloxStream& rng);
// kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2/fan_out), torchvision's ResNet conv init.
void kaiming_normal_fan_out(Tensor& w, PhiloxStream& rng);
// kaiming_normal_(mode="fan_in", nonlinearity="relu"): N(0, 2/fan_in).
void kaiming_normal_fan_in(Tensor& w, PhiloxStream& rng);

// Deterministic per-layer seeds from one model seed (splitmix64 of seed and a counter).
class SeedSequence {
 public:
  explicit SeedSequence(uint64_t seed) : seed_(seed) {}
  uint64_t next();

 private:
  uint64_t seed_, count_ = 0;
};

}  // namespace packrat::init
