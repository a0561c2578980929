// CpuBackend: memory-efficient attention (core/backend.h, attention_forward), FlashAttention-2's
// algorithm on the CPU. A task is one head g and a block of kQueryBlock queries; it walks the keys
// in tiles of kKeyBlock, so the (T, S) scores exist only as one (kQueryBlock, kKeyBlock) tile per
// thread. The tile products are oneDNN's dnnl_sgemm on the owning thread (inside an OpenMP region
// oneDNN runs a GEMM single-threaded). Masks are per-row key ranges (attention_math::key_end), so
// a masked key is skipped rather than set to -inf, and key tiles past every row's range are never
// computed: a causal head does about half the work of the standard path.
//
// Forward, per row i: m = running max, l = running sum of exp(s - m), o = running sum of
// exp(s - m) * dropout * v; a new tile rescales l and o by exp(m_old - m_new). y = o / l,
// lse = m + log l. Backward (per head, one thread: dk and dv accumulate without atomics), with
// D_i = dy_i . y_i and P_ij = exp(s_ij - lse_i) recomputed per tile, Z the dropout keep * scale:
//   dv_j += (P Z)_ij dy_i,  dP_ij = Z_ij (dy_i . v_j),  dS_ij = P_ij (dP_ij - D_i),
//   dq_i += scale dS_ij k_j,  dk_j += scale dS_ij q_i.
// (D_i = sum_j P_ij dP_ij because y_i = sum_j (P Z)_ij v_j, with or without dropout.)
//
// q, k, v and y are f32 or bf16 (attention_reads): a bf16 operand is read tile by tile into f32
// scratch, so the kernels hold no f32 copy of a whole operand, and a bf16 y is written from the
// f32 accumulator rounded once (bit for bit the f32 kernel's y rounded). lse, the gradient and dq,
// dk, dv are f32 (dk and dv accumulate over query blocks).
//
// Scratch: a few tiles per thread (std::vector, about 100 KiB; 80 KiB more for bf16 operands at
// E = 64), outside the allocator's tags like every kernel's registers; everything the caller gets
// back (y, lse, dq, dk, dv) is a tensor.
#include <dnnl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "core/attention_math.h"
#include "core/cpu/bf16_simd.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/dropout_words.h"
#include "core/cpu/loops.h"
#include "core/pointwise_math.h"

namespace packrat::cpu {

namespace {

using AttentionArgs = Backend::AttentionArgs;

constexpr int64_t kQueryBlock = 64;  // rows of a tile
constexpr int64_t kKeyBlock = 128;   // keys of a tile

// C = alpha op(A) op(B) + beta C, row-major (dnnl_sgemm). A failure is recorded in `failed` (no
// exception may leave an OpenMP region) and reported after it.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, std::atomic<bool>& failed) {
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != dnnl_success)
    failed = true;
}

// The geometry every task shares.
struct Geometry {
  int64_t G, T, S, E, Ev, H;
  const int64_t* lengths;  // (B) or null
  const AttentionArgs* a;
  int64_t length_of(int64_t g) const {
    return lengths ? attention_math::clamp_length(lengths[g / H], S) : S;
  }
  // Keys row i of head g sees: [0, end).
  int64_t end_of(int64_t g, int64_t i) const { return attention_math::key_end(i, T, S, a->causal, length_of(g)); }
};

// Dropout's keep for elements [e0, e0 + n) of the (G, T, S) probabilities, as 0 / keep_scale:
// the words of each dropout block the run touches (64 Philox counters for 256 elements) made on
// SIMD lanes, as dropout_forward makes them. A tile's row of 128 keys lies in one or two blocks.
struct DropoutRow {
  uint64_t seed, stream;
  float p, keep_scale;
  void fill(int64_t e0, int64_t n, float* z) const {
    constexpr int64_t kLanes = DropoutPhilox::kLanes, kBlock = DropoutPhilox::kBlock;
    alignas(64) uint32_t w[4][kLanes];  // the words of the block `block`
    for (int64_t t = 0; t < n;) {
      const int64_t block = (e0 + t) / kBlock, base = block * kBlock;
      dropout_block_words(seed, stream, static_cast<uint64_t>(block * kLanes), w);
      const int64_t end = std::min(n, base + kBlock - e0);  // the run's elements in this block
      while (t < end) {  // a run of lanes of one word: element r = 64 word + lane of the block
        const int64_t r = e0 + t - base, lane0 = r % kLanes, len = std::min(end - t, kLanes - lane0);
        const uint32_t* words = w[r / kLanes] + lane0;
        float* zt = z + t;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) zt[j] = DropoutPhilox::keep(words[j], p) ? keep_scale : 0.0f;
        t += len;
      }
    }
  }
};

Geometry geometry_of(int64_t G, const Tensor& key_lengths, const AttentionArgs& a) {
  return {G, a.T, a.S, a.E, a.Ev, a.heads, key_lengths.defined() ? key_lengths.data<int64_t>() : nullptr, &a};
}

DropoutRow dropout_of(const AttentionArgs& a) {
  return {a.seed, a.stream, a.dropout_p, 1.0f / (1.0f - a.dropout_p)};
}

// Rows [r0, r0 + n) of a row-major (rows, width) matrix as f32: the rows themselves when In is
// float, else their values converted into `scratch` (at least n * width floats).
template <class In>
const float* f32_rows(const In* m, int64_t r0, int64_t n, int64_t width, std::vector<float>& scratch) {
  if constexpr (std::is_same_v<In, float>) {
    return m + r0 * width;
  } else {
    simd::bf16_to_f32_run(m + r0 * width, n * width, scratch.data());
    return scratch.data();
  }
}

// Scratch for f32_rows: `floats` when In is 16-bit, none when the rows are read in place.
template <class In>
std::vector<float> tile_scratch(int64_t floats) {
  return std::vector<float>(std::is_same_v<In, float> ? 0 : floats);
}

// out[0, n) = x[0, n) in Out (rounded once where Out is bf16).
template <class Out>
void store_row(const float* x, int64_t n, Out* out) {
  if constexpr (std::is_same_v<Out, float>) std::copy(x, x + n, out);
  else simd::f32_to_bf16_run(x, n, out);
}

// The dtype-typed pointer to t's data (f32 or bf16, as the caller's dispatch read it).
template <class In>
const In* typed(const Tensor& t) {
  return static_cast<const In*>(t.raw());
}

template <class In>
void forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Geometry& geo,
                    Backend::AttentionOut& out) {
  const AttentionArgs& a = *geo.a;
  const int64_t G = geo.G, T = a.T, S = a.S, E = a.E, Ev = a.Ev;
  const In* qp = typed<In>(q);
  const In* kp = typed<In>(k);
  const In* vp = typed<In>(v);
  In* yp = static_cast<In*>(out.y.raw());
  float* lp = out.lse.data<float>();
  const bool drop = a.dropout_p > 0.0f;
  const DropoutRow dropout = dropout_of(a);
  const int64_t qblocks = (T + kQueryBlock - 1) / kQueryBlock, tasks = G * qblocks;
  std::atomic<bool> failed{false};
  const bool parallel = tasks > 1 && G * T * S * (E + Ev) >= kMinParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<float> s(kQueryBlock * kKeyBlock);  // (rows, keys): scores, then probabilities
    std::vector<float> z(kKeyBlock);                 // (keys) dropout's keep * scale of one row
    std::vector<float> o(kQueryBlock * Ev);          // (rows, Ev) running output
    std::vector<float> m(kQueryBlock), l(kQueryBlock);
    std::vector<float> q32 = tile_scratch<In>(kQueryBlock * E);  // (rows, E) the query block in f32
    std::vector<float> k32 = tile_scratch<In>(kKeyBlock * E);    // (keys, E) the key tile in f32
    std::vector<float> v32 = tile_scratch<In>(kKeyBlock * Ev);   // (keys, Ev) the value tile in f32
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t g = task / qblocks, i0 = task % qblocks * kQueryBlock, rows = std::min(kQueryBlock, T - i0);
      const float* qb = f32_rows(qp + g * T * E, i0, rows, E, q32);
      const In* kg = kp + g * S * E;
      const In* vg = vp + g * S * Ev;
      std::fill(o.begin(), o.begin() + rows * Ev, 0.0f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t keys = geo.end_of(g, i0 + rows - 1);  // the last row sees the most keys
      for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, keys - j0);
        const float* kt = f32_rows(kg, j0, cols, E, k32);
        gemm(false, true, rows, cols, E, a.scale, qb, E, kt, E, 0.0f, s.data(), kKeyBlock, failed);
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s.data() + r * kKeyBlock;
          const int64_t valid = std::clamp<int64_t>(geo.end_of(g, i0 + r) - j0, 0, cols);
          if (valid == 0) {
            std::fill(sr, sr + cols, 0.0f);
            continue;
          }
          float mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int64_t c = 0; c < valid; ++c) mx = sr[c] > mx ? sr[c] : mx;
          const float rescale = pwmath::fast_exp(m[r] - mx);  // 0 on the first tile (m = -inf)
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < valid; ++c) {
            const float e = pwmath::fast_exp(sr[c] - mx);
            sr[c] = e;
            sum += e;
          }
          std::fill(sr + valid, sr + cols, 0.0f);
          l[r] = l[r] * rescale + sum;
          m[r] = mx;
          if (rescale != 1.0f)
            for (float* it = o.data() + r * Ev; it != o.data() + (r + 1) * Ev; ++it) *it *= rescale;
          if (drop) {
            dropout.fill(((g * T + i0 + r) * S) + j0, valid, z.data());
            for (int64_t c = 0; c < valid; ++c) sr[c] *= z[c];
          }
        }
        const float* vt = f32_rows(vg, j0, cols, Ev, v32);
        gemm(false, false, rows, Ev, cols, 1.0f, s.data(), kKeyBlock, vt, Ev, 1.0f, o.data(), Ev, failed);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / l[r];
        float* orow = o.data() + r * Ev;
        for (int64_t e = 0; e < Ev; ++e) orow[e] *= inv;
        store_row(orow, Ev, yp + (g * T + i0 + r) * Ev);
        lp[g * T + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
  PACKRAT_CHECK(!failed, "attention_forward: oneDNN's sgemm failed");
}

template <class In>
void backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y, const Tensor& lse,
                     const Tensor& dy, const Geometry& geo, Backend::AttentionGrads& out) {
  const AttentionArgs& a = *geo.a;
  const int64_t G = geo.G, T = a.T, S = a.S, E = a.E, Ev = a.Ev;
  const bool want_dq = out.dq.defined(), want_dk = out.dk.defined(), want_dv = out.dv.defined();
  const bool need_ds = want_dq || want_dk;
  const In* qp = typed<In>(q);
  const In* kp = typed<In>(k);
  const In* vp = typed<In>(v);
  const In* yp = typed<In>(y);
  const float* lp = lse.data<float>();
  const float* gp = dy.data<float>();
  float* dqp = want_dq ? out.dq.data<float>() : nullptr;
  float* dkp = want_dk ? out.dk.data<float>() : nullptr;
  float* dvp = want_dv ? out.dv.data<float>() : nullptr;
  const bool drop = a.dropout_p > 0.0f;
  const DropoutRow dropout = dropout_of(a);
  std::atomic<bool> failed{false};
  const bool parallel = G > 1 && G * T * S * (E + Ev) >= kMinParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<float> p(kQueryBlock * kKeyBlock);   // (rows, keys) P
    std::vector<float> ds(kQueryBlock * kKeyBlock);  // (rows, keys) P Z, then dP, then dS
    std::vector<float> z(kQueryBlock * kKeyBlock);   // (rows, keys) dropout's keep * scale
    std::vector<float> dqb(kQueryBlock * E);         // (rows, E) dq of the block
    std::vector<float> d(T);                         // (T) dy_i . y_i of the head
    std::vector<float> q32 = tile_scratch<In>(kQueryBlock * E);  // (rows, E) the query block in f32
    std::vector<float> k32 = tile_scratch<In>(kKeyBlock * E);    // (keys, E) the key tile in f32
    std::vector<float> v32 = tile_scratch<In>(kKeyBlock * Ev);   // (keys, Ev) the value tile in f32
    std::vector<float> y32 = tile_scratch<In>(Ev);               // (Ev) one output row in f32
#pragma omp for schedule(dynamic)
    for (int64_t g = 0; g < G; ++g) {
      const In* qg = qp + g * T * E;
      const In* kg = kp + g * S * E;
      const In* vg = vp + g * S * Ev;
      const float* gg = gp + g * T * Ev;
      for (int64_t i = 0; i < T; ++i) {
        const float* yi = f32_rows(yp + g * T * Ev, i, 1, Ev, y32);
        const float* gi = gg + i * Ev;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t e = 0; e < Ev; ++e) dot += yi[e] * gi[e];
        d[i] = dot;
      }
      for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T - i0);
        const float* qb = f32_rows(qg, i0, rows, E, q32);
        if (want_dq) std::fill(dqb.begin(), dqb.begin() + rows * E, 0.0f);
        const int64_t keys = geo.end_of(g, i0 + rows - 1);
        for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
          const int64_t cols = std::min(kKeyBlock, keys - j0);
          const float* kt = f32_rows(kg, j0, cols, E, k32);
          gemm(false, true, rows, cols, E, a.scale, qb, E, kt, E, 0.0f, p.data(), kKeyBlock, failed);
          for (int64_t r = 0; r < rows; ++r) {
            float* pr = p.data() + r * kKeyBlock;
            const int64_t valid = std::clamp<int64_t>(geo.end_of(g, i0 + r) - j0, 0, cols);
            const float lse_r = lp[g * T + i0 + r];
#pragma omp simd
            for (int64_t c = 0; c < valid; ++c) pr[c] = pwmath::fast_exp(pr[c] - lse_r);
            std::fill(pr + valid, pr + cols, 0.0f);
            if (drop) {
              float* zr = z.data() + r * kKeyBlock;
              dropout.fill((g * T + i0 + r) * S + j0, cols, zr);
              float* pz = ds.data() + r * kKeyBlock;
              for (int64_t c = 0; c < cols; ++c) pz[c] = pr[c] * zr[c];
            }
          }
          if (want_dv)  // dv_j += (P Z)^T dy
            gemm(true, false, cols, Ev, rows, 1.0f, drop ? ds.data() : p.data(), kKeyBlock, gg + i0 * Ev, Ev, 1.0f,
                 dvp + (g * S + j0) * Ev, Ev, failed);
          if (!need_ds) continue;
          // dP Z = dy v^T, then dS = P (dP Z - D)
          const float* vt = f32_rows(vg, j0, cols, Ev, v32);
          gemm(false, true, rows, cols, Ev, 1.0f, gg + i0 * Ev, Ev, vt, Ev, 0.0f, ds.data(), kKeyBlock, failed);
          for (int64_t r = 0; r < rows; ++r) {
            const float* pr = p.data() + r * kKeyBlock;
            const float* zr = z.data() + r * kKeyBlock;
            float* dr = ds.data() + r * kKeyBlock;
            const float di = d[i0 + r];
            if (drop) {
#pragma omp simd
              for (int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] * zr[c] - di);
            } else {
#pragma omp simd
              for (int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - di);
            }
          }
          if (want_dq)
            gemm(false, false, rows, E, cols, a.scale, ds.data(), kKeyBlock, kt, E, 1.0f, dqb.data(), E, failed);
          if (want_dk)
            gemm(true, false, cols, E, rows, a.scale, ds.data(), kKeyBlock, qb, E, 1.0f, dkp + (g * S + j0) * E, E,
                 failed);
        }
        if (want_dq) std::copy(dqb.begin(), dqb.begin() + rows * E, dqp + (g * T + i0) * E);
      }
    }
  }
  PACKRAT_CHECK(!failed, "attention_backward: oneDNN's sgemm failed");
}

}  // namespace

bool CpuBackend::attention_reads(DType dtype) const { return dtype == DType::f32 || dtype == DType::bf16; }

Backend::AttentionOut CpuBackend::attention_forward(const Tensor& q_any, const Tensor& k_any, const Tensor& v_any,
                                                    const Tensor& key_lengths, const AttentionArgs& a) {
  const int64_t G = check_attention_operands("attention_forward", *this, q_any, k_any, v_any, key_lengths, a);
  const Tensor q = q_any.to_plain(), k = k_any.to_plain(), v = v_any.to_plain();
  const Geometry geo = geometry_of(G, key_lengths, a);
  AttentionOut out;
  out.y = empty_cpu(Shape{G, a.T, a.Ev}, q.dtype());  // (G, T, Ev) in q's dtype
  out.lse = empty_cpu(Shape{G, a.T});                 // (G, T)
  if (q.dtype() == DType::bf16) forward_kernel<bf16_t>(q, k, v, geo, out);
  else forward_kernel<float>(q, k, v, geo, out);
  return out;
}

Backend::AttentionGrads CpuBackend::attention_backward(const Tensor& q_any, const Tensor& k_any, const Tensor& v_any,
                                                       const Tensor& y_any, const Tensor& lse_any,
                                                       const Tensor& grad_any, const Tensor& key_lengths,
                                                       const AttentionArgs& a, bool want_dq, bool want_dk,
                                                       bool want_dv) {
  const int64_t G = check_attention_operands("attention_backward", *this, q_any, k_any, v_any, key_lengths, a);
  check_attention_outputs(y_any, lse_any, grad_any, q_any.dtype(), G, a);
  const Tensor q = q_any.to_plain(), k = k_any.to_plain(), v = v_any.to_plain();
  const Tensor y = y_any.to_plain(), lse = lse_any.to_plain(), dy = grad_any.to_plain();
  const Geometry geo = geometry_of(G, key_lengths, a);
  AttentionGrads out;
  // dq is written block by block; dk and dv accumulate over query blocks.
  if (want_dq) out.dq = empty_cpu(Shape{G, a.T, a.E});    // (G, T, E)
  if (want_dk) out.dk = zeros_cpu(Shape{G, a.S, a.E});    // (G, S, E)
  if (want_dv) out.dv = zeros_cpu(Shape{G, a.S, a.Ev});   // (G, S, Ev)
  if (q.dtype() == DType::bf16) backward_kernel<bf16_t>(q, k, v, y, lse, dy, geo, out);
  else backward_kernel<float>(q, k, v, y, lse, dy, geo, out);
  return out;
}

}  // namespace packrat::cpu
