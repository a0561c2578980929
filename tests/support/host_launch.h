#pragma once
// Runs a CUDA kernel's per-index body (a PACKRAT_HD functor from core/cuda/kernels/) on the host,
// over the indices launch_for_each would give it on a GPU: the CPU tests check the index
// arithmetic of every such kernel against the CPU backend, with no GPU.
#include <cstdint>

#include "core/cuda/kernels/channel_sums.h"

namespace packrat::testing {

template <class Body>
void run_on_host(int64_t n, const Body& body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

// The same for a body over quads of 4 elements (core/cuda/kernels/float_io.h): n elements.
template <class Body>
void run_quads_on_host(int64_t n, const Body& body) {
  run_on_host((n + 3) / 4, body);
}

// A body over (item, lane, lanes) (launch_for_each_lane): every lane of every item, in order.
template <class Body>
void run_lanes_on_host(int64_t items, int lanes, const Body& body) {
  for (int64_t item = 0; item < items; ++item)
    for (int sub = 0; sub < lanes; ++sub) body(item, sub, lanes);
}

// A per-channel finalize body (body(c, a, b)) over channels [0, C), with each channel's sums as
// launch_channel_finalize's warps add them (ChannelPartials::sums replays their order).
template <class Body>
void run_channel_finalize_on_host(const cuda::ChannelPartials& partials, int64_t C, const Body& body) {
  for (int64_t c = 0; c < C; ++c) {
    double a, b;
    partials.sums(c, a, b);
    body(c, a, b);
  }
}

}  // namespace packrat::testing
