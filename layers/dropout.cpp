#include "layers/dropout.h"

#include <atomic>

#include "autograd/ops.h"

namespace packrat {

namespace {
std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_next_index{0};
}  // namespace

void set_dropout_seed(uint64_t seed) { g_seed = seed; }
uint64_t dropout_seed() { return g_seed; }

Dropout::Dropout(float p) : p_(p), stream_{g_next_index++, 0} {
  PACKRAT_CHECK(p >= 0.0f && p < 1.0f, "Dropout: probability must be in [0, 1), got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!training() || p_ == 0.0f) return ops::dropout(x, p_, false, 0, 0);
  return ops::dropout(x, p_, true, dropout_seed(), next_stream());
}

}  // namespace packrat
