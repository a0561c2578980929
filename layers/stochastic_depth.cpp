#include "layers/stochastic_depth.h"

#include <atomic>

#include "autograd/ops/drop_path.h"
#include "layers/dropout.h"

namespace packrat {

namespace {
std::atomic<uint64_t> g_next_index{0};
// Streams with the top bit set: never one of Dropout's (module index << 40, index < 2^23).
constexpr uint64_t kStreamTag = uint64_t{1} << 63;
}  // namespace

StochasticDepth::StochasticDepth(float p) : p_(p), stream_{g_next_index++, 0} {
  PACKRAT_CHECK(p >= 0.0f && p <= 1.0f, "StochasticDepth: probability must be in [0, 1], got {}", p);
}

Tensor StochasticDepth::forward(const Tensor& x) {
  if (!training() || p_ == 0.0f) return ops::drop_path(x, p_, false, 0, 0);
  // stream: tag bit, module index in bits 40..62, call count in the low 40.
  const uint64_t stream = kStreamTag | ((stream_.index & ((uint64_t{1} << 23) - 1)) << 40) |
                          (stream_.calls++ & ((uint64_t{1} << 40) - 1));
  return ops::drop_path(x, p_, true, dropout_seed(), stream);
}

}  // namespace packrat
