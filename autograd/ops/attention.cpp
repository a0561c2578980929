// Scaled dot-product attention (autograd/ops.h): the standard path, composed from the backend's
// batched matmul, softmax and dropout, and the memory-efficient one (the backend's
// attention_forward / attention_backward, FlashAttention-2). The standard path:
//   S = q k^T * scale (+ causal mask: -inf above the diagonal)   (B..., T, S)
//   P = softmax(S), Pd = dropout(P) (training, p > 0)            (B..., T, S)
//   y = Pd v                                                      (B..., T, Ev)
// One node; each saved tensor carries its own op name so that store rules can target it:
//   attention_q, attention_k, attention_v: the inputs, as matmul saves its operands;
//   attention_softmax: P (Need::Value), as softmax and the second matmul save it (once here);
//   attention_dropout: the keep mask (Need::Mask), only when dropout is active.
// PyTorch (1.13, F.multi_head_attention_forward) saves the same four (q pre-scaled) plus
// dropout's output and mask; here Pd is recomputed from P and the mask in backward.
// Under autocast (core/autocast.h) q, k, v are cast to its dtype, and P, y and what is saved
// are in it (as PyTorch's autocast saves them); the matmuls run in it where the backend computes
// in it (their operands g and dS rounded to it), the scores and softmax's sums in f32.
// Backward: dPd = g v^T, dP = mask-scale(dPd), dS = softmax_backward(P, dP) * scale,
//   dq = dS k, dk = dS^T q, dv = Pd^T g.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("attention_q", "attention_k", "attention_v", "attention_softmax", "attention_dropout",
                        "attention_out", "attention_lse")

namespace {

SaveRequest request(std::string_view op, Need need, bool exact = false) {
  SaveRequest r;
  r.need = need;
  r.op = op;
  r.name = LayerScope::current();
  r.exact = exact;
  return r;
}

Shape with_last2(const Shape& batch_of, int64_t a, int64_t b) {
  std::vector<int64_t> d = batch_of.dims();
  d[d.size() - 2] = a;
  d[d.size() - 1] = b;
  return Shape(d);
}

// The memory-efficient path: one node saving q and k (exact), v, y and the per-row log-sum-exp
// (exact); backward recomputes the probabilities from them (core/backend.h attention_backward).
// q, k, v: the op's inputs (their gradients go there); data: the dtype they are computed with.
Tensor memory_efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v, DType data,
                                  const Tensor& key_lengths, const Backend::AttentionArgs& a) {
  Backend& be = backend_of(q);
  const Tensor qp = q.to_plain().to(data), kp = k.to_plain().to(data), vp = v.to_plain().to(data);  // as saved
  // The kernels read the saved dtype where the backend attention_reads it (the CPU: bf16), else f32 copies.
  const DType read = attention_dtype(be, data);
  Backend::AttentionOut fwd = be.attention_forward(qp.to(read), kp.to(read), vp.to(read), key_lengths, a);
  Tensor y = in_dtype(fwd.y.reshape(with_last2(q.shape(), a.T, a.Ev)), data);  // (B..., T, Ev)
  if (!needs_grad({&q, &k, &v})) return y;
  std::vector<SavedHandle> saved;
  // q and k exact: backward recomputes P = exp(scale q k^T - lse) with the forward's lse, so an
  // error in a score is an error in the exponent: quantized q and k leave rows that no longer sum
  // to 1, a bias no stochastic rounding averages out (docs/attention.md: measured on BERT).
  saved.push_back(save_for_backward(qp, request("attention_q", Need::Value, /*exact=*/true)));
  saved.push_back(save_for_backward(kp, request("attention_k", Need::Value, /*exact=*/true)));
  saved.push_back(save_for_backward(vp, request("attention_v", Need::Value)));
  saved.push_back(save_for_backward(y, request("attention_out", Need::Value)));
  saved.push_back(save_for_backward(fwd.lse, request("attention_lse", Need::Value, /*exact=*/true)));
  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  const Layout lq = q.layout(), lk = k.layout(), lv = v.layout();
  record("attention", {&q, &k, &v}, {&y}, std::move(saved),
         [=](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           Backend& b = backend_of(grads[0]);
           const Tensor g = grads[0].to_plain();  // (B..., T, Ev)
           Backend::AttentionGrads d = b.attention_backward(
               n.load(0, read), n.load(1, read), n.load(2, read), n.load(3, read), n.load(4), g, key_lengths, a,
               static_cast<bool>(n.inputs[0]), static_cast<bool>(n.inputs[1]), static_cast<bool>(n.inputs[2]));
           std::vector<Tensor> r(3);
           if (d.dq.defined()) r[0] = d.dq.reshape(q_shape).to_layout(lq);
           if (d.dk.defined()) r[1] = d.dk.reshape(k_shape).to_layout(lk);
           if (d.dv.defined()) r[2] = d.dv.reshape(v_shape).to_layout(lv);
           return r;
         });
  return y;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& o) {
  const std::string where = op_where("attention");
  PACKRAT_CHECK(q_in.defined() && k_in.defined() && v_in.defined(), "{}: q, k and v must be defined", where);
  check_same_device("attention", {&q_in, &k_in, &v_in});
  for (const Tensor* t : {&q_in, &k_in, &v_in})
    PACKRAT_CHECK(is_f32_or_half(t->dtype()), "{}: expects f32, bf16 or f16 q, k, v, got {}", where,
                  dtype_name(t->dtype()));
  // The dtype of q, k, v as computed with and saved, and of y: autocast's, else their common one.
  const DType data = autocast_dtype() != DType::f32 ? autocast_dtype() : result_dtype({&q_in, &k_in, &v_in});
  const Tensor &q = q_in, &k = k_in, &v = v_in;  // the inputs, as recorded
  PACKRAT_CHECK(q.rank() >= 2 && k.rank() == q.rank() && v.rank() == q.rank(),
                "{}: q, k, v must have one rank >= 2, got {}, {}, {}", where, q.shape().str(), k.shape().str(),
                v.shape().str());
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < q.rank(); ++i) {
    PACKRAT_CHECK(k.dim(i) == q.dim(i) && v.dim(i) == q.dim(i), "{}: batch dims of q {}, k {}, v {} differ", where,
                  q.shape().str(), k.shape().str(), v.shape().str());
    batch *= q.dim(i);
  }
  const int64_t T = q.dim(-2), E = q.dim(-1), S = k.dim(-2), Ev = v.dim(-1);
  PACKRAT_CHECK(k.dim(-1) == E, "{}: q {} and k {} differ in the embedding dim", where, q.shape().str(), k.shape().str());
  PACKRAT_CHECK(v.dim(-2) == S, "{}: k {} and v {} differ in the number of keys", where, k.shape().str(), v.shape().str());
  PACKRAT_CHECK(!o.causal || T <= S, "{}: a causal mask needs no more queries ({}) than keys ({})", where, T, S);
  PACKRAT_CHECK(o.dropout_p >= 0.0f && o.dropout_p < 1.0f, "{}: dropout probability must be in [0, 1), got {}", where,
                o.dropout_p);
  const float scale = o.scale > 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(E));
  const bool drop = o.training && o.dropout_p > 0.0f;
  const float keep_scale = 1.0f / (1.0f - o.dropout_p);
  int64_t heads = 1;  // per sample, when key lengths are given
  if (o.key_lengths.defined()) {
    const Tensor& len = o.key_lengths;
    PACKRAT_CHECK(q.rank() >= 3 && len.dtype() == DType::i64 && len.rank() == 1 && len.dim(0) == q.dim(0),
                  "{}: key lengths must be ({}) i64, one per sample of q {}, got {}", where,
                  q.rank() >= 3 ? q.dim(0) : 0, q.shape().str(), len.describe());
    PACKRAT_CHECK(len.device() == q.device(), "{}: key lengths are on {}, q on {}", where, len.device().str(),
                  q.device().str());
    heads = batch / q.dim(0);
  }
  if (o.memory_efficient) {
    Backend::AttentionArgs a;
    a.T = T, a.S = S, a.E = E, a.Ev = Ev, a.heads = heads;
    a.scale = scale;
    a.causal = o.causal;
    a.dropout_p = drop ? o.dropout_p : 0.0f;
    a.seed = o.seed, a.stream = o.stream;
    return memory_efficient_attention(q, k, v, data, o.key_lengths, a);
  }

  Backend& be = backend_of(q);
  const Tensor qp = q.to_plain().to(data), kp = k.to_plain().to(data), vp = v.to_plain().to(data);  // as saved
  // The matmuls run in the kernels' dtype: 16-bit where the backend computes in it (PyTorch's
  // autocast runs bmm so), else f32 on the 16-bit values (the kernels' edges).
  const DType kernel = kernel_dtype(be, data);
  const Shape s_shape = with_last2(q.shape(), T, S), y_shape = with_last2(q.shape(), T, Ev);
  Tensor p;  // (B..., T, S), the softmax output, in data's dtype
  {
    Tensor s = be.matmul(qp.to(kernel), false, kp.to(kernel), true, batch, T, E, S, Tensor(), s_shape);  // f32
    if (o.causal) be.causal_mask_fill(s);
    if (o.key_lengths.defined()) be.key_padding_fill(s, o.key_lengths);
    p = in_dtype(be.softmax_forward(s, scale, rows_dtype(be, data)), data);
  }
  const bool grad = needs_grad({&q, &k, &v});
  Tensor mask;  // (B..., T, S) u8, when dropout is active and backward needs it
  const Tensor pd = drop ? be.dropout_forward(be.dropout_reads(data) ? p : as_f32(p), o.dropout_p, keep_scale, o.seed,
                                              o.stream, grad ? &mask : nullptr)
                         : p;
  Tensor y = in_dtype(be.matmul(pd.to(kernel), false, vp.to(kernel), false, batch, T, S, Ev, Tensor(), y_shape, kernel),
                      data);  // (B..., T, Ev)
  if (!grad) return y;

  // What each gradient needs: dq <- k, v, P; dk <- q, v, P; dv <- P only.
  const bool gq = q.requires_grad(), gk = k.requires_grad();  // dv needs P, which every gradient needs
  std::vector<SavedHandle> saved;
  int iq = -1, ik = -1, iv = -1, ip, im = -1;
  auto keep = [&](const Tensor& t, std::string_view op, Need need) {
    saved.push_back(save_for_backward(t, request(op, need)));
    return static_cast<int>(saved.size()) - 1;
  };
  if (gk) iq = keep(qp, "attention_q", Need::Value);
  if (gq) ik = keep(kp, "attention_k", Need::Value);
  if (gq || gk) iv = keep(vp, "attention_v", Need::Value);
  ip = keep(p, "attention_softmax", Need::Value);
  if (drop) im = keep(mask, "attention_dropout", Need::Mask);

  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  const Layout lq = q.layout(), lk = k.layout(), lv = v.layout();
  record("attention", {&q, &k, &v}, {&y}, std::move(saved),
         [=](Node& n, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tensor g = grads[0].to_plain();  // (B..., T, Ev) f32
           Backend& b = backend_of(g);
           const Tensor gk = at_kernel_edge(g, data, kernel);  // as a 16-bit kernel reads it
           // P as the row kernels read it: a compressing store decodes it straight into that dtype
           // (its plain load gives f32 values, an f32 (T, S) tensor more).
           const Tensor P = n.load(static_cast<size_t>(ip), rows_dtype(b, data));
           const Tensor m = drop ? n.load(static_cast<size_t>(im)) : Tensor();
           std::vector<Tensor> r(3);
           if (n.inputs[2]) {
             const Tensor pdv = drop ? b.mask_scale(b.dropout_reads(P.dtype()) ? P : as_f32(P), m, keep_scale) : P;
             r[2] = b.matmul(pdv.to(kernel), true, gk, false, batch, S, T, Ev, Tensor(), v_shape).to_layout(lv);  // (S, Ev)
           }
           if (!n.inputs[0] && !n.inputs[1]) return r;
           Tensor ds;  // (B..., T, S), in the kernels' dtype
           {
             const Tensor vs = n.load(static_cast<size_t>(iv), kernel).to_plain();
             Tensor dp = b.matmul(gk, false, vs, true, batch, T, Ev, S, Tensor(), s_shape);  // (B..., T, S) f32
             if (drop) dp = b.mask_scale(dp, m, keep_scale);
             ds = b.softmax_backward(P, dp, scale, rows_dtype(b, data));
           }
           ds = at_kernel_edge(ds, data, kernel);  // after dP is gone
           if (n.inputs[0]) {
             const Tensor ks = n.load(static_cast<size_t>(ik), kernel).to_plain();
             r[0] = b.matmul(ds, false, ks, false, batch, T, S, E, Tensor(), q_shape).to_layout(lq);  // (T, E)
           }
           if (n.inputs[1]) {
             const Tensor qs = n.load(static_cast<size_t>(iq), kernel).to_plain();
             r[1] = b.matmul(ds, true, qs, false, batch, S, T, E, Tensor(), k_shape).to_layout(lk);  // (S, E)
           }
           return r;
         });
  return y;
}

}  // namespace packrat::ops
