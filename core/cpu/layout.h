#pragma once
// The CPU backend's blocked layouts: channels in blocks innermost, the block oneDNN's jit
// convolutions read and write on this CPU: nChw16c with AVX-512, nChw8c without (AVX2). Used only
// when C is a multiple of the block, so no padding is ever held. Code outside core/cpu/ never
// creates them; it meets them only as "the layout this tensor came in". Either blocked layout
// is accepted on any CPU (a tensor made elsewhere, a test's); convolutions make the native one.
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cpu {

// The blocked layout oneDNN's jit convolutions use on this CPU: nChw16c or nChw8c.
Layout native_blocked_layout();

// The native blocked layout for C channels where it holds no padding, plain otherwise.
inline Layout blocked_if_aligned(int64_t C) {
  const Layout blocked = native_blocked_layout();
  return C % channel_block(blocked) == 0 ? blocked : Layout::Plain;
}

// Element offset of logical (n, c, h, w) in a 4-d buffer of the given layout (plain or blocked).
inline int64_t nchw_offset(Layout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t B = channel_block(l);
  if (B == 0) return ((n * C + c) * H + h) * W + w;
  const int64_t cb = c / B, ci = c % B;
  return (((n * (C / B) + cb) * H + h) * W + w) * B + ci;
}

}  // namespace packrat::cpu
