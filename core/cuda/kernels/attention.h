#pragma once
// The CUDA memory-efficient attention's row bodies (core/backend.h attention_forward /
// attention_backward; the CPU's tiled version is core/cpu/cpu_backend_attention.cpp). CUDA-free,
// so the host tests run these very bodies (tests/support/host_rows.h).
//
// A warp per row (launched with 32 lanes): the lanes split the head dimension (lane l holds
// elements l, l + 32, ... of its row's q, o, dq in registers: at most kMaxPerLane each, so heads
// of up to 256 with 32 lanes), and every score is a lane-sum of partial dot products (`red.sum`:
// warp shuffles). Every lane then holds the same score, max and sum, so the online softmax
// (FlashAttention's m, l rescaling) runs in lockstep without further communication. The scores
// are never stored: forward keeps y and the row's log-sum-exp; backward recomputes P from them.
// Backward is two passes without atomics: one warp per query row (dq, and D_i = dy_i . y_i, which
// the second pass reads), then one warp per key row (dk, dv), each recomputing its P_ij.
// Masks and dropout follow core/attention_math.h, as the CPU does.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/attention_math.h"
#include "core/cuda/kernels/rows.h"  // max_of
#include "core/hd.h"

namespace packrat::cuda {

constexpr int kAttentionMaxPerLane = 8;  // head dims per lane held in registers

// What the three bodies share: operands (G heads, sample-major) and the masks.
struct AttentionGeometry {
  const float* q;              // (G, T, E)
  const float* k;              // (G, S, E)
  const float* v;              // (G, S, Ev)
  const int64_t* lengths;      // (B) key lengths, or null
  int64_t T, S, E, Ev, heads;  // heads per sample (G / B) when lengths is set
  float scale;
  bool causal;
  float dropout_p;  // 0: no dropout
  uint64_t seed, stream;

  PACKRAT_HD int64_t length_of(int64_t g) const {
    return lengths ? attention_math::clamp_length(lengths[g / heads], S) : S;
  }
  // Dropout's factor for element (g, i, j) of the probabilities: keep / (1 - p), or 1.
  PACKRAT_HD float dropout_factor(int64_t g, int64_t i, int64_t j) const {
    if (dropout_p <= 0.0f) return 1.0f;
    return attention_math::dropout_keeps(seed, stream, (g * T + i) * S + j, dropout_p) ? 1.0f / (1.0f - dropout_p)
                                                                                      : 0.0f;
  }
};

// Row r = g T + i: y[r] and lse[r].
struct AttentionForwardRow {
  AttentionGeometry a;
  float* y;    // (G, T, Ev)
  float* lse;  // (G, T)
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const int64_t g = r / a.T, i = r % a.T;
    const int64_t end = attention_math::key_end(i, a.T, a.S, a.causal, a.length_of(g));
    float qr[kAttentionMaxPerLane], o[kAttentionMaxPerLane];
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      qr[c] = e < a.E ? a.q[r * a.E + e] : 0.0f;
      o[c] = 0.0f;
    }
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    for (int64_t j = 0; j < end; ++j) {
      const float* kj = a.k + (g * a.S + j) * a.E;
      const float* vj = a.v + (g * a.S + j) * a.Ev;
      float part = 0.0f;
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.E) part += qr[c] * kj[e];
      }
      const float s = red.sum(part) * a.scale;
      const float mn = max_of(m, s);
      const float rescale = expf(m - mn);  // 0 at the first key (m = -inf)
      const float pj = expf(s - mn);
      l = l * rescale + pj;
      m = mn;
      const float w = pj * a.dropout_factor(g, i, j);
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.Ev) o[c] = o[c] * rescale + w * vj[e];
      }
    }
    const float inv = 1.0f / l;
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      if (e < a.Ev) y[r * a.Ev + e] = o[c] * inv;
    }
    if (lane == 0) lse[r] = m + logf(l);
  }
};

// Backward, pass 1, row r = g T + i: D[r] = dy_r . y_r, and dq[r] (when dq is set).
struct AttentionBackwardQueryRow {
  AttentionGeometry a;
  const float* y;    // (G, T, Ev)
  const float* lse;  // (G, T)
  const float* dy;   // (G, T, Ev)
  float* d;          // (G, T) out
  float* dq;         // (G, T, E) out, or null
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const int64_t g = r / a.T, i = r % a.T;
    float gr[kAttentionMaxPerLane], qr[kAttentionMaxPerLane], acc[kAttentionMaxPerLane];
    float part = 0.0f;
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      gr[c] = e < a.Ev ? dy[r * a.Ev + e] : 0.0f;
      if (e < a.Ev) part += gr[c] * y[r * a.Ev + e];
      qr[c] = e < a.E ? a.q[r * a.E + e] : 0.0f;
      acc[c] = 0.0f;
    }
    const float di = red.sum(part);
    if (lane == 0) d[r] = di;
    if (!dq) return;
    const int64_t end = attention_math::key_end(i, a.T, a.S, a.causal, a.length_of(g));
    const float lse_r = lse[r];
    for (int64_t j = 0; j < end; ++j) {
      const float* kj = a.k + (g * a.S + j) * a.E;
      const float* vj = a.v + (g * a.S + j) * a.Ev;
      float sp = 0.0f, dp = 0.0f;
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.E) sp += qr[c] * kj[e];
        if (e < a.Ev) dp += gr[c] * vj[e];
      }
      const float pj = expf(red.sum(sp) * a.scale - lse_r);
      const float ds = pj * (red.sum(dp) * a.dropout_factor(g, i, j) - di);
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.E) acc[c] += ds * kj[e];
      }
    }
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      if (e < a.E) dq[r * a.E + e] = acc[c] * a.scale;
    }
  }
};

// Backward, pass 2, row r = g S + j (a key): dk[r] and dv[r] (each when set), over the queries
// that see key j, with D from pass 1.
struct AttentionBackwardKeyRow {
  AttentionGeometry a;
  const float* lse;  // (G, T)
  const float* dy;   // (G, T, Ev)
  const float* d;    // (G, T)
  float* dk;         // (G, S, E) out, or null
  float* dv;         // (G, S, Ev) out, or null
  template <class Reduce>
  PACKRAT_HD void operator()(int64_t r, int lane, int lanes, const Reduce& red) const {
    const int64_t g = r / a.S, j = r % a.S;
    float kr[kAttentionMaxPerLane], vr[kAttentionMaxPerLane], gk[kAttentionMaxPerLane], gv[kAttentionMaxPerLane];
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      kr[c] = e < a.E ? a.k[r * a.E + e] : 0.0f;
      vr[c] = e < a.Ev ? a.v[r * a.Ev + e] : 0.0f;
      gk[c] = gv[c] = 0.0f;
    }
    // Queries that see key j: none past the sequence's length; from j - (S - T) on when causal.
    const int64_t first = j >= a.length_of(g) ? a.T : (a.causal && j > a.S - a.T ? j - (a.S - a.T) : 0);
    for (int64_t i = first; i < a.T; ++i) {
      const int64_t qi = g * a.T + i;
      const float* q = a.q + qi * a.E;
      const float* gi = dy + qi * a.Ev;
      float sp = 0.0f, dp = 0.0f;
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.E) sp += q[e] * kr[c];
        if (e < a.Ev) dp += gi[e] * vr[c];
      }
      const float pj = expf(red.sum(sp) * a.scale - lse[qi]);
      const float z = a.dropout_factor(g, i, j);
      const float ds = pj * (red.sum(dp) * z - d[qi]);
      PACKRAT_UNROLL
      for (int c = 0; c < kAttentionMaxPerLane; ++c) {
        const int64_t e = lane + static_cast<int64_t>(c) * lanes;
        if (e < a.E) gk[c] += ds * q[e];
        if (e < a.Ev) gv[c] += pj * z * gi[e];
      }
    }
    PACKRAT_UNROLL
    for (int c = 0; c < kAttentionMaxPerLane; ++c) {
      const int64_t e = lane + static_cast<int64_t>(c) * lanes;
      if (dk && e < a.E) dk[r * a.E + e] = gk[c] * a.scale;
      if (dv && e < a.Ev) dv[r * a.Ev + e] = gv[c];
    }
  }
};

// scores (B, rows_per_sample, S) in place: -inf where key j >= the sample's (clamped) length.
struct KeyPaddingFill {
  float* scores;
  const int64_t* lengths;  // (B)
  int64_t rows_per_sample, S;
  PACKRAT_HD void operator()(int64_t idx) const {
    const int64_t j = idx % S, b = idx / S / rows_per_sample;
    if (j >= attention_math::clamp_length(lengths[b], S)) scores[idx] = -std::numeric_limits<float>::infinity();
  }
};

// lengths[n] = the position of the first pad token of row n (T without one), at least 1.
struct SequenceLengths {
  const int64_t* tokens;  // (N, T)
  int64_t* lengths;       // (N)
  int64_t T, pad;
  PACKRAT_HD void operator()(int64_t n) const {
    int64_t end = 0;
    while (end < T && tokens[n * T + end] != pad) ++end;
    lengths[n] = end < 1 ? 1 : end;
  }
};

}  // namespace packrat::cuda
