// CudaBackend: memory-efficient attention (a warp per row: attention_kernels.cu, bodies in
// kernels/attention.h), the key padding fill and sequence lengths.
#include <string>

#include "core/cuda/attention_kernels.h"
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"

namespace packrat::cuda {

namespace {

Tensor f32_on(Device device, const Shape& shape, MemTag tag) {
  return Tensor::empty(shape, DType::f32, Layout::Plain, tag, device);
}

// The kernels' view of the operands, after the checks every attention primitive shares.
AttentionGeometry geometry_of(const char* what, const Backend& be, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_lengths, const Backend::AttentionArgs& a, int64_t& G) {
  G = check_attention_operands(what, be, q, k, v, key_lengths, a);
  PACKRAT_CHECK(a.E <= kAttentionMaxHeadDim && a.Ev <= kAttentionMaxHeadDim,
                "{}: heads of dimension {} (values {}): the CUDA memory-efficient attention holds at most {} per "
                "head (use model.attention: standard)",
                what, a.E, a.Ev, kAttentionMaxHeadDim);
  AttentionGeometry g{};
  g.q = q.device_data<float>();
  g.k = k.device_data<float>();
  g.v = v.device_data<float>();
  g.lengths = key_lengths.defined() ? key_lengths.device_data<int64_t>() : nullptr;
  g.T = a.T, g.S = a.S, g.E = a.E, g.Ev = a.Ev, g.heads = a.heads;
  g.scale = a.scale;
  g.causal = a.causal;
  g.dropout_p = a.dropout_p;
  g.seed = a.seed, g.stream = a.stream;
  return g;
}

}  // namespace

Backend::AttentionOut CudaBackend::attention_forward(const Tensor& q_any, const Tensor& k_any, const Tensor& v_any,
                                                     const Tensor& key_lengths, const AttentionArgs& a) {
  const Tensor q = q_any.to_plain(), k = k_any.to_plain(), v = v_any.to_plain();
  int64_t G = 0;
  const AttentionGeometry geo = geometry_of("attention_forward", *this, q, k, v, key_lengths, a, G);
  AttentionOut out;
  out.y = f32_on(device(), Shape{G, a.T, a.Ev}, TagScope::current());  // (G, T, Ev)
  out.lse = f32_on(device(), Shape{G, a.T}, TagScope::current());      // (G, T)
  launch_attention_forward(geo, G, out.y.device_data<float>(), out.lse.device_data<float>());
  PACKRAT_CHECK_LAUNCH("attention_forward");
  return out;
}

Backend::AttentionGrads CudaBackend::attention_backward(const Tensor& q_any, const Tensor& k_any,
                                                        const Tensor& v_any, const Tensor& y_any,
                                                        const Tensor& lse_any, const Tensor& grad_any,
                                                        const Tensor& key_lengths, const AttentionArgs& a,
                                                        bool want_dq, bool want_dk, bool want_dv) {
  const Tensor q = q_any.to_plain(), k = k_any.to_plain(), v = v_any.to_plain();
  const Tensor y = y_any.to_plain(), lse = lse_any.to_plain(), dy = grad_any.to_plain();
  int64_t G = 0;
  const AttentionGeometry geo = geometry_of("attention_backward", *this, q, k, v, key_lengths, a, G);
  check_attention_outputs(y, lse, dy, DType::f32, G, a);
  AttentionGrads out;
  if (want_dq) out.dq = f32_on(device(), Shape{G, a.T, a.E}, TagScope::current());   // (G, T, E)
  if (want_dk) out.dk = f32_on(device(), Shape{G, a.S, a.E}, TagScope::current());   // (G, S, E)
  if (want_dv) out.dv = f32_on(device(), Shape{G, a.S, a.Ev}, TagScope::current());  // (G, S, Ev)
  Tensor d = f32_on(device(), Shape{G, a.T}, MemTag::Workspace);  // (G, T) dy_i . y_i
  launch_attention_backward(geo, G, y.device_data<float>(), lse.device_data<float>(), dy.device_data<float>(),
                            d.device_data<float>(), f32_or_null(out.dq), f32_or_null(out.dk), f32_or_null(out.dv));
  PACKRAT_CHECK_LAUNCH("attention_backward");
  return out;
}

void CudaBackend::key_padding_fill(Tensor& scores, const Tensor& key_lengths) {
  const int64_t rows_per_sample = check_key_padding(scores, key_lengths);
  if (scores.numel() == 0) return;
  launch_key_padding_fill(scores.device_data<float>(), key_lengths.device_data<int64_t>(), scores.dim(0),
                          rows_per_sample, scores.dim(-1));
  PACKRAT_CHECK_LAUNCH("key_padding_fill");
}

Tensor CudaBackend::sequence_lengths(const Tensor& tokens, int64_t pad) {
  PACKRAT_CHECK(tokens.dtype() == DType::i64 && tokens.rank() == 2,
                "sequence_lengths: expects tokens (N, T) i64, got {}", tokens.describe());
  const int64_t N = tokens.dim(0), T = tokens.dim(1);
  Tensor lengths = Tensor::empty(Shape{N}, DType::i64, Layout::Plain, TagScope::current(), device());  // (N)
  launch_sequence_lengths(tokens.device_data<int64_t>(), lengths.device_data<int64_t>(), N, T, pad);
  PACKRAT_CHECK_LAUNCH("sequence_lengths");
  return lengths;
}

}  // namespace packrat::cuda
