#pragma once
// The differentiable ops. Each records a Node when grad is needed and keeps what backward
// needs only through the saved-tensor store (see saved_tensor_store.h). The layer name for
// reports and error messages comes from the enclosing LayerScope.
//
// Layout: 4-d activations may be plain NCHW or a backend's own (core/dtype.h: the CPU's nChw16c
// or nChw8c, a GPU's NHWC). Ops that care (conv2d, batchnorm2d, pooling) accept any and return
// the backend's preferred layout;
// elementwise ops keep their input's layout; ops that need plain data (linear, flatten,
// softmax, ...) reorder their input themselves.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace packrat::ops {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
};
// x (N, Cin, H, W), weight (Cout, Cin/groups, KH, KW), bias (Cout) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o);

// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// a (B..., M, K) @ b (B..., K, N) -> (B..., M, N); 2-d and batched (same batch dims).
Tensor matmul(const Tensor& a, const Tensor& b);

// Training mode updates running_mean/var in place (momentum as PyTorch: new = (1-m)*old + m*batch,
// unbiased variance for the running estimate) and counts the batch in num_batches_tracked (an i64
// scalar; null: none), all in one backend call; eval mode normalizes with the running statistics.
Tensor batchnorm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                   Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f,
                   Tensor* num_batches_tracked = nullptr);
// Normalizes over the last dimension. x (..., D), weight/bias (D).
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);

// Any built-in activation by name (core/activation_id.h: relu, gelu, silu, ...); saves through
// the store as Need::Derivative.
Tensor activation(const Tensor& x, std::string_view fn);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);

struct Pool2dOptions {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h = 0, pad_w = 0;
};
Tensor maxpool2d(const Tensor& x, const Pool2dOptions& o);
Tensor avgpool2d(const Tensor& x, const Pool2dOptions& o);  // padding counted, as PyTorch by default
Tensor adaptive_avgpool2d(const Tensor& x, int64_t out_h, int64_t out_w);

Tensor add(const Tensor& a, const Tensor& b);  // same shape (layouts reconciled)
Tensor mul(const Tensor& a, const Tensor& b);  // same shape
Tensor scale(const Tensor& a, float s);        // a * s
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
Tensor transpose_last2(const Tensor& x);       // (..., M, N) -> (..., N, M), a copy

// ---- Transformer ops (permute.cpp, concat.cpp, attention.cpp). None but attention saves anything.
// torch.permute(x, perm).contiguous(): a plain copy; the gradient is permuted back.
Tensor permute(const Tensor& x, std::span<const int64_t> perm);
// torch.cat(xs, dim) (dim may be negative); its backward splits the gradient.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// torch.split(x, sizes, dim), each part a copy; its backward concatenates (zeros for unused parts).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// x.narrow(dim, start, length).contiguous(); its backward pads the gradient with zeros.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// x.expand(shape).contiguous() (numpy broadcasting, e.g. a class token (1, 1, D) -> (N, 1, D));
// the gradient is summed back to x's shape.
Tensor expand(const Tensor& x, const Shape& shape);
// Scaled dot-product attention, softmax(q k^T * scale [+ masks]) with dropout, times v:
// q (B..., T, E), k (B..., S, E), v (B..., S, Ev) -> (B..., T, Ev). It records one node whose saved
// tensors each have their own op name, so store rules can target them. Two algorithms:
//  - standard: the (T, S) probabilities are materialised and saved: attention_q, attention_k,
//    attention_v (Need::Value), attention_softmax (Need::Value), attention_dropout (the keep mask,
//    Need::Mask; only when dropout is active). Saved bytes grow with T * S.
//  - memory_efficient (FlashAttention-2, core/backend.h attention_forward): saves attention_q and
//    attention_k (exact: backward recomputes exp(q k^T - lse), where a quantized score would be an
//    error in the exponent), attention_v, attention_out (y, Need::Value) and attention_lse (the
//    per-row log-sum-exp (B..., T), exact); backward recomputes the probabilities tile by tile,
//    dropout's mask included. Saved bytes grow with T + S.
// Both draw dropout's keep mask alike (element (b, i, j) of the (B..., T, S) probabilities), so
// the two give the same result up to f32 rounding.
struct AttentionOptions {
  bool causal = false;     // query i sees keys j <= i (+ S - T)
  float dropout_p = 0.0f;  // on the attention weights, in training only
  bool training = false;
  uint64_t seed = 0, stream = 0;  // dropout's Philox key
  float scale = 0.0f;             // 0: 1 / sqrt(E)
  bool memory_efficient = false;  // the algorithm (above)
  // Key padding: (B) i64 on q's device, B = q.dim(0): sample b's queries see keys j < length[b]
  // only (read clamped to [1, S]). Undefined: every key.
  Tensor key_lengths;
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o);

// Inverted dropout: zeroes with probability p and scales the rest by 1/(1-p); identity when
// !training or p == 0. Randomness: Philox keyed by (seed, stream).
Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream);
Tensor softmax(const Tensor& x);  // over the last dimension
// ids (N...) i64 in [0, num) -> (N..., D); weight (num, D).
Tensor embedding(const Tensor& ids, const Tensor& weight);
// logits (N, C), targets (N) i64 -> mean loss, a scalar. label_smoothing and ignore_index as
// PyTorch: targets equal to ignore_index (PyTorch's value: -100) count for nothing, the mean is
// over the others; every target ignored gives loss 0 and a zero gradient (PyTorch: NaN).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing = 0.0f,
                     std::optional<int64_t> ignore_index = std::nullopt);

}  // namespace packrat::ops
