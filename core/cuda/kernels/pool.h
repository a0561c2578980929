#pragma once
// Per-index bodies of the CUDA pooling kernels (core/cuda/pool_kernels.cu), on plain NCHW
// buffers. CUDA-free and fmt-free: tests/core/cuda_kernels_pool_test.cpp runs them on the host
// against the CPU backend. Backward passes gather (one index per input element, summing over
// the outputs whose windows hold it) instead of scattering, so they need no atomics and give
// the same bits on every run.
#include <cstdint>

#include "core/adaptive_window.h"
#include "core/hd.h"

namespace packrat::cuda {

// The fixed-window geometry (PoolGeometry's fields, copied: core/backend.h is not CUDA-safe).
struct PoolShape {
  int64_t N, C, H, W, OH, OW, KH, KW, stride_h, stride_w, pad_h, pad_w;
};

// Outputs [lo, hi) along one dim whose windows (start o * stride - pad, size k) hold input h.
struct OutputRange {
  int64_t lo, hi;
};
PACKRAT_HD inline OutputRange outputs_holding(int64_t h, int64_t k, int64_t stride, int64_t pad, int64_t out) {
  // o * stride - pad <= h  and  o * stride - pad + k > h.
  const int64_t top = h + pad;  // >= 0
  int64_t lo = top - k + 1 <= 0 ? 0 : (top - k + 1 + stride - 1) / stride;
  int64_t hi = top / stride + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

// Max pooling forward for output index i (n, c, oh, ow): y = the window's maximum over the
// input (padding never wins), argmax (when non-null) = its row-major position in the KH x KW
// window, the first one on ties: oneDNN's workspace, which the CPU backend returns.
template <typename Index>
struct MaxPoolForward {
  const float* x;  // (N, C, H, W)
  float* y;        // (N, C, OH, OW)
  Index* argmax;   // (N, C, OH, OW) or null
  PoolShape g;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, nc = i / (g.OW * g.OH);
    const float* plane = x + nc * g.H * g.W;
    const int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
    float best = 0.0f;
    int64_t best_k = -1;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t h = h0 + kh;
      if (h < 0 || h >= g.H) continue;
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t w = w0 + kw;
        if (w < 0 || w >= g.W) continue;
        const float v = plane[h * g.W + w];
        if (best_k < 0 || v > best) best = v, best_k = kh * g.KW + kw;
      }
    }
    y[i] = best;
    if (argmax) argmax[i] = static_cast<Index>(best_k < 0 ? 0 : best_k);
  }
};

// Average pooling forward for output index i; the divisor counts the padding (KH * KW) or only
// the input elements the window covers.
struct AvgPoolForward {
  const float* x;  // (N, C, H, W)
  float* y;        // (N, C, OH, OW)
  PoolShape g;
  bool include_padding;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, nc = i / (g.OW * g.OH);
    const float* plane = x + nc * g.H * g.W;
    const int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
    float sum = 0.0f;
    int64_t count = 0;
    for (int64_t h = h0 < 0 ? 0 : h0; h < h0 + g.KH && h < g.H; ++h)
      for (int64_t w = w0 < 0 ? 0 : w0; w < w0 + g.KW && w < g.W; ++w) {
        sum += plane[h * g.W + w];
        ++count;
      }
    const int64_t divisor = include_padding ? g.KH * g.KW : count;
    y[i] = divisor > 0 ? sum / static_cast<float>(divisor) : 0.0f;
  }
};

// Elements of output (oh, ow)'s window that lie inside the input.
PACKRAT_HD inline int64_t valid_in_window(const PoolShape& g, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  const int64_t h1 = h0 + g.KH < g.H ? h0 + g.KH : g.H, w1 = w0 + g.KW < g.W ? w0 + g.KW : g.W;
  const int64_t rows = h1 - (h0 < 0 ? 0 : h0), cols = w1 - (w0 < 0 ? 0 : w0);
  return rows > 0 && cols > 0 ? rows * cols : 0;
}

// The backward of a pooling for input index i (n, c, h, w): the sum, over the outputs (oh, ow)
// whose windows hold the element, of term(o, oh, ow, h, w), o the output's flat index.
template <typename Term>
PACKRAT_HD float sum_over_windows_holding(const PoolShape& g, int64_t i, Term term) {
  const int64_t w = i % g.W, h = (i / g.W) % g.H, nc = i / (g.W * g.H);
  const OutputRange rh = outputs_holding(h, g.KH, g.stride_h, g.pad_h, g.OH);
  const OutputRange rw = outputs_holding(w, g.KW, g.stride_w, g.pad_w, g.OW);
  const int64_t base = nc * g.OH * g.OW;
  float sum = 0.0f;
  for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) sum += term(base + oh * g.OW + ow, oh, ow, h, w);
  return sum;
}

// Max pooling backward for input index i (n, c, h, w): the sum of gy over the outputs whose
// argmax points at this element.
template <typename Index>
struct MaxPoolBackward {
  const float* gy;      // (N, C, OH, OW)
  const Index* argmax;  // (N, C, OH, OW)
  float* dx;            // (N, C, H, W)
  PoolShape g;
  PACKRAT_HD void operator()(int64_t i) const {
    dx[i] = sum_over_windows_holding(g, i, [&](int64_t o, int64_t oh, int64_t ow, int64_t h, int64_t w) {
      const int64_t k = (h - (oh * g.stride_h - g.pad_h)) * g.KW + (w - (ow * g.stride_w - g.pad_w));
      return static_cast<int64_t>(argmax[o]) == k ? gy[o] : 0.0f;
    });
  }
};

// Average pooling backward for input index i: the sum of gy / divisor over the outputs whose
// windows hold this element.
struct AvgPoolBackward {
  const float* gy;  // (N, C, OH, OW)
  float* dx;        // (N, C, H, W)
  PoolShape g;
  bool include_padding;
  PACKRAT_HD void operator()(int64_t i) const {
    dx[i] = sum_over_windows_holding(g, i, [&](int64_t o, int64_t oh, int64_t ow, int64_t, int64_t) {
      const int64_t divisor = include_padding ? g.KH * g.KW : valid_in_window(g, oh, ow);
      return gy[o] / static_cast<float>(divisor);
    });
  }
};

// Adaptive average pooling forward for output index i, summed in double like the CPU backend.
struct AdaptiveAvgPoolForward {
  const float* x;  // (N, C, H, W)
  float* y;        // (N, C, OH, OW)
  int64_t H, W, OH, OW;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH);
    const float* plane = x + nc * H * W;
    const int64_t h0 = adaptive_window_begin(oh, H, OH), h1 = adaptive_window_end(oh, H, OH);
    const int64_t w0 = adaptive_window_begin(ow, W, OW), w1 = adaptive_window_end(ow, W, OW);
    double s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += plane[h * W + w];
    y[i] = static_cast<float>(s / static_cast<double>((h1 - h0) * (w1 - w0)));
  }
};

// Adaptive outputs [lo, hi) along one dim whose windows hold input h: begin(o) <= h < end(o).
// end(o) > h first holds at o = floor(h * out / in); begin(o) is non-decreasing in o.
PACKRAT_HD inline OutputRange adaptive_outputs_holding(int64_t h, int64_t in, int64_t out) {
  const int64_t lo = h * out / in;
  int64_t hi = lo;
  while (hi < out && adaptive_window_begin(hi, in, out) <= h) ++hi;
  return {lo, hi};
}

// Adaptive average pooling backward for input index i: sum over the windows that hold it of
// gy / window size, in the same float steps as the CPU backend (gy / size, then added).
struct AdaptiveAvgPoolBackward {
  const float* gy;  // (N, C, OH, OW)
  float* dx;        // (N, C, H, W)
  int64_t H, W, OH, OW;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
    const OutputRange rh = adaptive_outputs_holding(h, H, OH), rw = adaptive_outputs_holding(w, W, OW);
    float sum = 0.0f;
    for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
      const int64_t rows = adaptive_window_end(oh, H, OH) - adaptive_window_begin(oh, H, OH);
      for (int64_t ow = rw.lo; ow < rw.hi; ++ow) {
        const int64_t cols = adaptive_window_end(ow, W, OW) - adaptive_window_begin(ow, W, OW);
        sum += gy[(nc * OH + oh) * OW + ow] / static_cast<float>(rows * cols);
      }
    }
    dx[i] = sum;
  }
};

}  // namespace packrat::cuda
