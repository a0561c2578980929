#pragma once
// Bias bodies of the convolution and matmul on CUDA (core/cuda/conv_kernels.cu,
// matmul_kernels.cu), CUDA-free: tests/core/cuda_kernels_dnn_test.cpp runs them on the host.
#include <cstdint>

#include "core/cuda/kernels/channel_sums.h"
#include "core/hd.h"

namespace packrat::cuda {

// y[n, c, h, w] += bias[c] for element i of an (N, C, HW) buffer (after cuDNN's convolution).
struct AddChannelBias {
  float* y;           // (N, C, H, W)
  const float* bias;  // (C)
  int64_t C, HW;
  PACKRAT_HD void operator()(int64_t i) const { y[i] += bias[channel_of(i, C, HW)]; }
};

// c[r, j] = bias[j] for element i of a (rows, N) buffer: the matmul's C before cuBLAS adds
// op(A) op(B) to it (beta = 1).
struct BroadcastRow {
  float* c;           // (rows, N)
  const float* bias;  // (N)
  int64_t N;
  PACKRAT_HD void operator()(int64_t i) const { c[i] = bias[i % N]; }
};

// gb[c] = the channel's sum of gy (a: the channel's sum of SumTerm).
struct ChannelSumFinalize {
  float* out;  // (C)
  PACKRAT_HD void operator()(int64_t c, double a, double) const { out[c] = static_cast<float>(a); }
};

// Column sums of an (M, N) row-major matrix in double, over rows [r0, r1) of the column j:
// part `p` of `parts` of column j covers rows [p * M / parts, (p + 1) * M / parts).
struct ColumnPartialSums {
  const float* m;   // (M, N)
  double* partial;  // (parts, N)
  int64_t M, N, parts;
  PACKRAT_HD void operator()(int64_t i) const {  // i = p * N + j: neighbouring threads read neighbouring columns
    const int64_t j = i % N, p = i / N;
    const int64_t r0 = p * M / parts, r1 = (p + 1) * M / parts;
    double s = 0;
    for (int64_t r = r0; r < r1; ++r) s += m[r * N + j];
    partial[i] = s;
  }
};

// out[j] = the parts of column j summed in order.
struct ColumnSumsFinalize {
  const double* partial;  // (parts, N)
  float* out;             // (N)
  int64_t N, parts;
  PACKRAT_HD void operator()(int64_t j) const {
    double s = 0;
    for (int64_t p = 0; p < parts; ++p) s += partial[p * N + j];
    out[j] = static_cast<float>(s);
  }
};

}  // namespace packrat::cuda
