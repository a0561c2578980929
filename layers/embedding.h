#pragma once
// nn.Embedding: weight (num, dim) ~ N(0, 1) as PyTorch, from Philox(seed). Input: i64 ids.
#include <cstdint>

#include "layers/module.h"

namespace packrat {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, uint64_t seed);
  Tensor forward(const Tensor& ids) override;  // (N...) i64 -> (N..., dim)
  Tensor& weight() { return weight_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

// The ids of a position embedding for n sequences of t tokens: (n, t) i64 on `device`, tag Data,
// 0 .. t-1 in every row (so the position embedding's output adds to the token embedding's
// without broadcasting).
Tensor position_ids(int64_t n, int64_t t, Device device);

}  // namespace packrat
