#pragma once
// Helpers shared by the elementwise/small ops (activation, elementwise, shape_ops, dropout,
// softmax, embedding, cross_entropy, layernorm).
#include <cstdint>

#include "core/parallel.h"

namespace packrat::ops::detail {

// Below this many elements of work a loop runs on the calling thread: an OpenMP region costs
// more than it saves on tiny tensors (and much more when the machine is oversubscribed).
constexpr int64_t kMinParallelWork = 1 << 15;

// fn(i) for i in [0, n); parallel only when n * work_per_item is large enough.
template <typename Fn>
void rows_for(int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n * work_per_item < kMinParallelWork) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    parallel_for(0, n, fn);
  }
}

}  // namespace packrat::ops::detail
