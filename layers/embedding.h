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

}  // namespace packrat
