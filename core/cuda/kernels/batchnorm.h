#pragma once
// Per-channel and per-element bodies of the CUDA batchnorm (core/cuda/batchnorm_kernels.cu), on
// (N, C, HW) buffers (plain NCHW, or NHWC as (N * H * W, C, 1)), in the CPU backend's arithmetic
// (core/cpu/batchnorm_loops.cpp): statistics about a per-channel shift in double, then
// y = x * scale + shift, dx = k (dy - a - (x - mean) b). CUDA-free:
// tests/core/cuda_kernels_batchnorm_test.cpp runs them on the host.
#include <cmath>
#include <cstdint>

#include "core/cuda/kernels/channel_sums.h"
#include "core/batchnorm_math.h"
#include "core/cuda/kernels/float_io.h"
#include "core/hd.h"

namespace packrat::cuda {

// y = x * scale + shift per channel from mean, var (C) and the optional weight / bias.
PACKRAT_HD inline void normalizing_affine(float mean, float var, const float* weight, const float* bias, int64_t c,
                                          float eps, float& scale, float& shift) {
  const double invstd = 1.0 / sqrt(static_cast<double>(var) + eps);
  const double k = (weight ? weight[c] : 1.0) * invstd;
  scale = static_cast<float>(k);
  shift = static_cast<float>((bias ? bias[c] : 0.0) - mean * k);
}

// Training statistics of channel c from the partial moments: mean and biased var (C), and the
// affine that normalizes with them.
struct BatchStatsFinalize {
  const float* x;       // (N, C, H, W): channel_center's shifts
  int64_t HW;
  const float* weight;  // (C) or null
  const float* bias;    // (C) or null
  double count;         // N * H * W
  float eps;
  float* mean;   // (C)
  float* var;    // (C)
  float* scale;  // (C)
  float* shift;  // (C)
  // a, b: the channel's sums of CenteredMomentsTerm.
  PACKRAT_HD void operator()(int64_t c, double a, double b) const {
    const double d = a / count;  // mean - center
    const double v = b / count - d * d;
    mean[c] = static_cast<float>(channel_center(x, c, HW) + d);
    var[c] = static_cast<float>(v > 0.0 ? v : 0.0);
    normalizing_affine(mean[c], var[c], weight, bias, c, eps, scale[c], shift[c]);
  }
};

// Inference: the affine from given statistics.
struct GivenStatsAffine {
  const float* mean;    // (C)
  const float* var;     // (C)
  const float* weight;  // (C) or null
  const float* bias;    // (C) or null
  float eps;
  float* scale;  // (C)
  float* shift;  // (C)
  PACKRAT_HD void operator()(int64_t c) const {
    normalizing_affine(mean[c], var[c], weight, bias, c, eps, scale[c], shift[c]);
  }
};

// y = x * scale[c] + shift[c] for quad q (core/cuda/kernels/float_io.h) of an (N, C, HW) buffer.
struct ChannelAffine {
  const float* x;      // (N, C, H, W)
  float* y;            // (N, C, H, W)
  const float* scale;  // (C)
  const float* shift;  // (C)
  int64_t C, HW, n;    // n = N * C * HW
  PACKRAT_HD void operator()(int64_t q) const {
    const int m = quad_len(q, n);
    float v[4] = {};
    int64_t c[4];
    load_floats4(x + 4 * q, m, v);
    channels_of4(4 * q, C, HW, c);
    for (int k = 0; k < 4; ++k) v[k] = v[k] * scale[c[k]] + shift[c[k]];
    store_floats4(v, m, y + 4 * q);
  }
};

// Backward, channel c, from the partial sums (sum dy, sum dy (x - mean)): dweight, dbias (when
// asked), and the coefficients of dx = k (dy - a - (x - mean) b); with global statistics (eval
// mode) a = b = 0.
struct BatchGradFinalize {
  const float* var;     // (C)
  const float* weight;  // (C) or null
  double count;         // N * H * W
  float eps;
  bool global_stats;
  float* dweight;  // (C) or null
  float* dbias;    // (C) or null
  float* k;        // (C)
  float* a;        // (C)
  float* b;        // (C)
  // sdy, sdyx: the channel's sums of GradMomentsTerm.
  PACKRAT_HD void operator()(int64_t c, double sdy, double sdyx) const {
    const double invstd = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
    k[c] = static_cast<float>((weight ? weight[c] : 1.0) * invstd);
    a[c] = global_stats ? 0.0f : static_cast<float>(sdy / count);
    b[c] = global_stats ? 0.0f : static_cast<float>(sdyx * invstd * invstd / count);
    if (dweight) dweight[c] = static_cast<float>(sdyx * invstd);
    if (dbias) dbias[c] = static_cast<float>(sdy);
  }
};

// dx = k (dy - a - (x - mean) b) for quad q.
struct BatchNormBackwardElement {
  const float* x;     // (N, C, H, W)
  const float* gy;    // (N, C, H, W)
  float* dx;          // (N, C, H, W)
  const float* mean;  // (C)
  const float* k;     // (C)
  const float* a;     // (C)
  const float* b;     // (C)
  int64_t C, HW, n;   // n = N * C * HW
  PACKRAT_HD void operator()(int64_t q) const {
    const int m = quad_len(q, n);
    float xv[4] = {}, gv[4] = {};
    int64_t c[4];
    load_floats4(x + 4 * q, m, xv);
    load_floats4(gy + 4 * q, m, gv);
    channels_of4(4 * q, C, HW, c);
    for (int j = 0; j < 4; ++j) xv[j] = k[c[j]] * (gv[j] - a[c[j]] - (xv[j] - mean[c[j]]) * b[c[j]]);
    store_floats4(xv, m, dx + 4 * q);
  }
};

// running_average (core/batchnorm_math.h) per channel: the mean (correction 1) and the variance
// (n / (n - 1)) in one kernel, which also counts the batch.
struct RunningUpdate {
  float* running_mean;      // (C)
  float* running_var;       // (C)
  int64_t* count;           // () num_batches_tracked, or null
  const float* batch_mean;  // (C)
  const float* batch_var;   // (C)
  float momentum;
  double var_correction;
  PACKRAT_HD void operator()(int64_t c) const {
    running_mean[c] = running_average(running_mean[c], batch_mean[c], momentum, 1.0);
    running_var[c] = running_average(running_var[c], batch_var[c], momentum, var_correction);
    if (c == 0 && count) ++count[0];
  }
};

}  // namespace packrat::cuda
