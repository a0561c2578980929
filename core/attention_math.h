#pragma once
// The per-element rules of attention's masks and dropout, written once (PACKRAT_HD) for the
// standard path's fills, the CPU and the CUDA memory-efficient kernels (core/backend.h,
// attention_forward): which keys a query sees, and whether dropout keeps a probability.
#include <cstdint>

#include "core/hd.h"
#include "core/philox.h"
#include "core/philox_maps.h"

namespace packrat::attention_math {

// A key length as the kernels read it: clamped to [1, S], so every query keeps its first key.
PACKRAT_HD inline int64_t clamp_length(int64_t length, int64_t S) {
  return length < 1 ? 1 : (length > S ? S : length);
}

// Query i of T sees keys [0, key_end) of S: all S, or up to its own position (i + S - T) when
// causal, and never a key at or past the sequence's length (`length`: S when unpadded).
PACKRAT_HD inline int64_t key_end(int64_t i, int64_t T, int64_t S, bool causal, int64_t length) {
  int64_t end = length;
  if (causal && i + (S - T) + 1 < end) end = i + (S - T) + 1;
  return end;
}

// Whether dropout keeps element e of a tensor, as dropout_forward(p, seed, stream) decides it
// (core/philox_maps.h, DropoutPhilox::counter_of and word_of).
PACKRAT_HD inline bool dropout_keeps(uint64_t seed, uint64_t stream, int64_t e, float p) {
  uint32_t w[4];
  Philox4x32::generate(seed, stream, DropoutPhilox::counter_of(e), w);
  return DropoutPhilox::keep(w[DropoutPhilox::word_of(e)], p);
}

}  // namespace packrat::attention_math
