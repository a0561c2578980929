#pragma once
// The CUDA shape primitives' per-index bodies (core/backend.h, "shape ops"): one thread per
// output element, writes coalesced. Templated on the element type T (with_typed picks it), so any
// dtype moves. CUDA-free, so the host tests run these very bodies.
#include <cstdint>
#include <limits>

#include "core/hd.h"

namespace packrat::cuda {

// (B, M, N) -> (B, N, M): index i runs over the output.
template <typename T>
struct TransposeLast2 {
  const T* x;  // (B, M, N)
  T* y;        // (B, N, M)
  int64_t M, N;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t b = i / (M * N), rem = i % (M * N), n = rem / M, m = rem % M;
    y[i] = x[(b * M + m) * N + n];
  }
};

// out[n][s][r] = in[n][r][s] for N (R, S) matrices with a short side (at most kThinSide): index
// i runs over N times the long side and moves the short side's elements of its row or column, so
// a warp's reads or its writes are consecutive and the others are short contiguous runs. The
// plain <-> NHWC reorder of a convolution weight is one (9 taps a filter row); a 32 x 32 tiled
// transpose leaves most of each tile idle there.
constexpr int64_t kThinSide = 16;
PACKRAT_HD inline int64_t thin_transpose_indices(int64_t N, int64_t R, int64_t S) { return N * (S <= R ? R : S); }
template <typename T>
struct ThinTranspose {
  const T* in;  // (N, R, S)
  T* out;       // (N, S, R)
  int64_t R, S;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t along = S <= R ? R : S;  // the long side
    const int64_t n = ((i | along) >> 32) == 0 ? static_cast<uint32_t>(i) / static_cast<uint32_t>(along) : i / along;
    const int64_t j = i - n * along;
    if (S <= R) {  // j = r: input row r's S elements, one into each output row
      for (int64_t s = 0; s < S; ++s) out[(n * S + s) * R + j] = in[(n * R + j) * S + s];
    } else {  // j = s: input column s's R elements, into output row s
      for (int64_t r = 0; r < R; ++r) out[(n * S + j) * R + r] = in[(n * R + r) * S + j];
    }
  }
};

// The option-A shortcut on plain tensors: y[n, c + front, ho, wo] = x[n, c, ho * s, wo * s], zero
// in the padded channels; index i runs over y (N, Cout, Ho, Wo).
struct PadChannelsSubsample {
  const float* x;  // (N, Cin, H, W)
  float* y;        // (N, Cout, Ho, Wo)
  int64_t Cin, H, W, Cout, Ho, Wo, stride, front;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t wo = i % Wo, ho = (i / Wo) % Ho, co = (i / (Wo * Ho)) % Cout, n = i / (Wo * Ho * Cout);
    const int64_t c = co - front;
    y[i] = c >= 0 && c < Cin ? x[((n * Cin + c) * H + ho * stride) * W + wo * stride] : 0.0f;
  }
};

// Its backward: gx[n, c, h, w] = grad[n, c + front, h / s, w / s] where h and w are multiples of
// s, else zero; index i runs over gx (N, Cin, H, W). Ho = ceil(H / s), so h / s < Ho.
struct PadChannelsSubsampleBackward {
  const float* grad;  // (N, Cout, Ho, Wo)
  float* gx;          // (N, Cin, H, W)
  int64_t Cin, H, W, Cout, Ho, Wo, stride, front;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % Cin, n = i / (W * H * Cin);
    gx[i] = h % stride == 0 && w % stride == 0
                ? grad[((n * Cout + c + front) * Ho + h / stride) * Wo + w / stride]
                : 0.0f;
  }
};

// The most axes permute takes on the GPU (the body holds its shape by value, as a kernel argument).
constexpr int kMaxPermuteRank = 12;

// y (out_dims) = x permuted: output index i -> coordinates (i_0, ..., i_{r-1}) -> source offset
// sum_k i_k * src_stride[k], src_stride[k] being x's stride of axis perm[k]. Index is uint32_t when
// every offset fits (a 32-bit division is several times cheaper than a 64-bit one on a GPU, and
// this body divides once per axis), else int64_t.
template <typename T, typename Index>
struct Permute {
  const T* x;
  T* y;
  int rank;
  Index out_dims[kMaxPermuteRank];
  Index src_stride[kMaxPermuteRank];
  PACKRAT_HD void operator()(int64_t i) const {
    Index rem = static_cast<Index>(i), off = 0;
    for (int k = rank - 1; k >= 0; --k) {
      off += (rem % out_dims[k]) * src_stride[k];
      rem /= out_dims[k];
    }
    y[i] = x[off];
  }
};

// Copies `outer` runs of `run` elements: run o from src + o * src_pitch to dst + o * dst_pitch;
// index i runs over outer x run. concat writes each input into its column of runs of the output,
// narrow reads its column of runs of the input.
template <typename T>
struct RunCopy {
  const T* src;
  T* dst;
  int64_t run, src_pitch, dst_pitch;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t o = i / run, k = i % run;
    dst[o * dst_pitch + k] = src[o * src_pitch + k];
  }
};

// scores (..., T, S) in place: -inf where key j > query i + (S - T); index i runs over all elements.
struct CausalMaskFill {
  float* scores;  // (rows, S), rows = (...) x T
  int64_t T, S;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t j = i % S, q = (i / S) % T;
    if (j > q + (S - T)) scores[i] = -std::numeric_limits<float>::infinity();
  }
};

}  // namespace packrat::cuda
