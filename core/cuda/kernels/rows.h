#pragma once
// The CUDA row kernels' bodies: softmax, cross-entropy with label smoothing and ignore_index,
// layernorm (the contracts of core/backend.h, the arithmetic of core/cpu/cpu_backend_rows.cpp).
// CUDA-free, so the host tests run these very bodies.
//
// A row body runs row r as `lanes` cooperating threads, this one being `lane`: each lane walks
// the elements j = lane, lane + lanes, ... (adjacent lanes read adjacent elements: coalesced),
// and `red` gives every lane the sum or max over all lanes of the row (a warp shuffle or
// block_sum on the GPU: rows_kernels.cu; a barrier between host threads in the tests). Every
// lane of a row must make the same reduce calls: a body returns early only for a whole row.
// Sums accumulate in double where the CPU backend does.
//
// Per-index bodies (launch_for_each) finish the work that is not per row.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/hd.h"

namespace packrat::cuda {

// "No bad index seen": the initial value of a first-bad-index flag (all bytes 0xFF).
constexpr unsigned long long kNoBadIndex = ~0ull;

// flag = min(flag, index): the first bad sample / position wins, whatever the thread order.
PACKRAT_HD inline void record_first_bad(unsigned long long* flag, int64_t index) {
#if defined(__CUDA_ARCH__)
  atomicMin(flag, static_cast<unsigned long long>(index));
#else
  if (static_cast<unsigned long long>(index) < *flag) *flag = static_cast<unsigned long long>(index);
#endif
}

// max as std::max(a, b) computes it (b only when a < b), so NaN handling matches the CPU.
PACKRAT_HD inline float max_of(float a, float b) { return a < b ? b : a; }

// y = softmax(x) per row of D: the max subtracted, f32 sums (as the CPU).
struct SoftmaxForwardRow {
  const float* x;  // (R, D)
  float* y;        // (R, D)
  int64_t D;
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const float* in = x + r * D;
    float* out = y + r * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = lane; j < D; j += lanes) mx = max_of(mx, in[j]);
    mx = red.max(mx);
    float sum = 0.0f;
    for (int64_t j = lane; j < D; j += lanes) sum += expf(in[j] - mx);
    const float inv = 1.0f / red.sum(sum);
    // exp again rather than store and reload: one global write per element, x is still in cache.
    for (int64_t j = lane; j < D; j += lanes) out[j] = expf(in[j] - mx) * inv;
  }
};

// dx = y * (g - sum(g * y)) per row, the dot in double.
struct SoftmaxBackwardRow {
  const float* y;  // (R, D)
  const float* g;  // (R, D)
  float* dx;       // (R, D)
  int64_t D;
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const float *yr = y + r * D, *gr = g + r * D;
    double dot = 0;
    for (int64_t j = lane; j < D; j += lanes) dot += static_cast<double>(gr[j]) * yr[j];
    const float d = static_cast<float>(red.sum(dot));
    for (int64_t j = lane; j < D; j += lanes) dx[r * D + j] = yr[j] * (gr[j] - d);
  }
};

// Whether target t is ignored: it equals ignore_index, and ignore_index is not core/backend.h's
// kNoIgnoreIndex (the lowest int64, "none").
PACKRAT_HD inline bool ignored_target(int64_t t, int64_t ignore_index) {
  return ignore_index != std::numeric_limits<int64_t>::min() && t == ignore_index;
}

// Row n's loss (1 - eps) (-log p[t_n]) + eps mean_c(-log p[c]) into row_loss[n] (double), and
// probs = softmax when probs is non-null. An ignored target gives the row loss 0 (its probs are
// written all the same); another target outside [0, C) records its sample in `bad` (the host
// reads it and throws the contract's error) and gives the row loss 0.
struct CrossEntropyForwardRow {
  const float* logits;      // (N, C)
  const int64_t* targets;   // (N)
  double* row_loss;         // (N)
  float* probs;             // (N, C) or null
  unsigned long long* bad;  // (1): the first sample with a bad target
  int64_t C;
  double eps;
  int64_t ignore_index;     // kNoIgnoreIndex: none
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t n, int lane, int lanes, const Reduce& red) const {
    const int64_t t = targets[n];
    const bool ignored = ignored_target(t, ignore_index);
    if (!ignored && (t < 0 || t >= C)) {  // the same for every lane of the row
      if (lane == 0) {
        record_first_bad(bad, n);
        row_loss[n] = 0;
      }
      return;
    }
    const float* x = logits + n * C;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = lane; c < C; c += lanes) mx = max_of(mx, x[c]);
    mx = red.max(mx);
    double sum = 0, sum_shifted = 0;  // sum exp(x - max), sum (x - max)
    for (int64_t c = lane; c < C; c += lanes) {
      const double s = static_cast<double>(x[c]) - mx;
      sum += exp(s);
      sum_shifted += s;
    }
    sum = red.sum(sum);
    sum_shifted = red.sum(sum_shifted);
    const double lse = log(sum);  // log p[c] = (x[c] - max) - lse
    if (lane == 0) {
      if (ignored) {
        row_loss[n] = 0;
      } else {
        const double nll = lse - (static_cast<double>(x[t]) - mx);
        const double smooth = lse - sum_shifted / static_cast<double>(C);  // mean_c(-log p[c])
        row_loss[n] = (1.0 - eps) * nll + eps * smooth;
      }
    }
    if (probs != nullptr)
      for (int64_t c = lane; c < C; c += lanes)
        probs[n * C + c] = static_cast<float>(exp(static_cast<double>(x[c]) - mx - lse));
  }
};

// out = the mean of the N values v (double) over the samples whose target is not ignored, as
// f32 (0 when every one is), and their number into count (double, exact below 2^53) unless
// count is null: one row of N (the cross-entropy loss).
struct TargetMeanToFloatRow {
  const double* v;         // (N)
  const int64_t* targets;  // (N)
  float* out;              // (1)
  double* count;           // (1) or null
  int64_t N;
  int64_t ignore_index;    // kNoIgnoreIndex: none
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t, int lane, int lanes, const Reduce& red) const {
    double s = 0, m = 0;
    for (int64_t i = lane; i < N; i += lanes)
      if (!ignored_target(targets[i], ignore_index)) {
        s += v[i];
        m += 1;
      }
    s = red.sum(s);
    m = red.sum(m);
    if (lane == 0) {
      out[0] = m > 0 ? static_cast<float>(s / m) : 0.0f;
      if (count != nullptr) count[0] = m;
    }
  }
};

// dlogits = (probs - q) * grad_loss / count, q = (1 - eps) onehot(t) + eps / C: `on` = 1 - eps +
// eps / C at the target, `off` = eps / C elsewhere; 0 in the row of an ignored target. grad_loss
// is read on the device (f32 or f64); count is the targets not ignored (the forward's).
template <typename G>
struct CrossEntropyBackward {
  const float* probs;      // (N, C)
  const int64_t* targets;  // (N)
  const G* grad_loss;      // (1)
  float* dx;               // (N, C)
  int64_t count, C;
  float off, on;
  int64_t ignore_index;    // kNoIgnoreIndex: none
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t n = i / C, c = i % C;
    const int64_t t = targets[n];
    if (ignored_target(t, ignore_index)) {
      dx[i] = 0.0f;
      return;
    }
    const float gscale = static_cast<float>(grad_loss[0]) / static_cast<float>(count);
    dx[i] = (probs[i] - (c == t ? on : off)) * gscale;
  }
};

// y = (x - mean) * rstd * weight + bias per row; mean and rstd (biased variance, two passes in
// double) per row.
struct LayerNormForwardRow {
  const float* x;       // (R, D)
  const float* weight;  // (D) or null
  const float* bias;    // (D) or null
  float* y;             // (R, D)
  float* mean;          // (R)
  float* rstd;          // (R)
  int64_t D;
  float eps;
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const float* xr = x + r * D;
    double s = 0;
    for (int64_t j = lane; j < D; j += lanes) s += xr[j];
    const double m = red.sum(s) / static_cast<double>(D);
    double v = 0;
    for (int64_t j = lane; j < D; j += lanes) v += (xr[j] - m) * (xr[j] - m);
    v = red.sum(v);
    const float rs = static_cast<float>(1.0 / sqrt(v / static_cast<double>(D) + eps));
    const float mf = static_cast<float>(m);
    if (lane == 0) {
      mean[r] = mf;
      rstd[r] = rs;
    }
    for (int64_t j = lane; j < D; j += lanes) {
      float h = (xr[j] - mf) * rs;
      if (weight != nullptr) h *= weight[j];
      if (bias != nullptr) h += bias[j];
      y[r * D + j] = h;
    }
  }
};

// dx = rstd (gh - mean(gh) - xhat mean(gh xhat)) per row, gh = grad * weight, xhat = (x - mean) rstd.
struct LayerNormBackwardRow {
  const float* x;       // (R, D)
  const float* mean;    // (R)
  const float* rstd;    // (R)
  const float* weight;  // (D) or null
  const float* g;       // (R, D)
  float* dx;            // (R, D)
  int64_t D;
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const float *xr = x + r * D, *gr = g + r * D;
    const float m = mean[r], rs = rstd[r];
    double sum_gh = 0, sum_ghx = 0;
    for (int64_t j = lane; j < D; j += lanes) {
      const float gh = weight != nullptr ? gr[j] * weight[j] : gr[j];
      const float xh = (xr[j] - m) * rs;
      sum_gh += gh;
      sum_ghx += static_cast<double>(gh) * xh;
    }
    sum_gh = red.sum(sum_gh);
    sum_ghx = red.sum(sum_ghx);
    const float a = static_cast<float>(sum_gh / static_cast<double>(D));
    const float b = static_cast<float>(sum_ghx / static_cast<double>(D));
    for (int64_t j = lane; j < D; j += lanes) {
      const float gh = weight != nullptr ? gr[j] * weight[j] : gr[j];
      const float xh = (xr[j] - m) * rs;
      dx[r * D + j] = rs * (gh - a - xh * b);
    }
  }
};

// The layernorm parameter gradients, pass 1: index i = (chunk, j) sums rows [chunk * rows_per_chunk,
// +rows_per_chunk) of column j in double: dweight_part = sum g xhat, dbias_part = sum g. Adjacent
// indices are adjacent columns, so every row read is coalesced; chunks give the GPU enough threads.
struct LayerNormParamPartials {
  const float* x;      // (R, D)
  const float* mean;   // (R)
  const float* rstd;   // (R)
  const float* g;      // (R, D)
  double* dweight_part;  // (chunks, D) or null
  double* dbias_part;    // (chunks, D) or null
  int64_t R, D, rows_per_chunk;
  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t chunk = i / D, j = i % D;
    const int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
    double sw = 0, sb = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const float gv = g[r * D + j];
      sw += static_cast<double>(gv) * ((x[r * D + j] - mean[r]) * rstd[r]);
      sb += gv;
    }
    if (dweight_part != nullptr) dweight_part[i] = sw;
    if (dbias_part != nullptr) dbias_part[i] = sb;
  }
};

// Pass 2: out[j] = sum over chunks of part[chunk, j], in chunk order, as f32.
struct SumChunksToFloat {
  const double* part;  // (chunks, D)
  float* out;          // (D)
  int64_t chunks, D;
  PACKRAT_HD void operator()(int64_t j) const {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += part[c * D + j];
    out[j] = static_cast<float>(s);
  }
};

// How many row chunks pass 1 uses for R rows of D columns: about 2^17 threads in all (an H100 holds
// ~270k resident), at least 8 rows per chunk so that pass 2 stays short.
inline int64_t layernorm_param_chunks(int64_t R, int64_t D) {
  const int64_t want = ((int64_t{1} << 17) + D - 1) / (D > 0 ? D : 1);
  const int64_t most = (R + 7) / 8;
  const int64_t c = want < most ? want : most;
  return c > 1 ? c : 1;
}

}  // namespace packrat::cuda
