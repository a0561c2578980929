#pragma once
// The CPU backend's blocked layout: nChw16c, channels in blocks of 16 innermost (oneDNN's fast
// layout on AVX-512). Used only when C % 16 == 0, so no padding is ever held. Code outside
// core/cpu/ never creates it; it meets it only as "the layout this tensor came in".
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cpu {

constexpr int64_t kChannelBlock = 16;

// The blocked layout for C channels where it holds no padding, plain otherwise.
constexpr Layout blocked_if_aligned(int64_t C) { return C % kChannelBlock == 0 ? Layout::nChw16c : Layout::Plain; }

// Element offset of logical (n, c, h, w) in a 4-d buffer of the given layout.
inline int64_t nchw_offset(Layout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (l == Layout::Plain) return ((n * C + c) * H + h) * W + w;
  const int64_t cb = c / kChannelBlock, ci = c % kChannelBlock;
  return (((n * (C / kChannelBlock) + cb) * H + h) * W + w) * kChannelBlock + ci;
}

}  // namespace packrat::cpu
