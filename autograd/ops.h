#pragma once
// The differentiable ops. Each records a Node when grad is needed and keeps what backward
// needs only through the saved-tensor store (see saved_tensor_store.h). The layer name for
// reports and error messages comes from the enclosing LayerScope.
//
// Layout: 4-d activations may be plain NCHW or nChw16c (core/dtype.h). Ops that care
// (conv2d, batchnorm2d, pooling) accept either and return oneDNN's preferred layout;
// elementwise ops keep their input's layout; ops that need plain data (linear, flatten,
// softmax, ...) reorder their input themselves.
#include <cstdint>
#include <optional>
#include <string_view>

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
// unbiased variance for the running estimate); eval mode normalizes with the running statistics.
Tensor batchnorm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                   Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);
// Normalizes over the last dimension. x (..., D), weight/bias (D).
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);

// Any built-in activation by name (relu, leaky_relu, relu6, gelu, silu, sigmoid, tanh, selu,
// softplus, elu, mish, hardswish); saves through the store as Need::Derivative.
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

// Inverted dropout: zeroes with probability p and scales the rest by 1/(1-p); identity when
// !training or p == 0. Randomness: Philox keyed by (seed, stream).
Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream);
Tensor softmax(const Tensor& x);  // over the last dimension
// ids (N...) i64 in [0, num) -> (N..., D); weight (num, D).
Tensor embedding(const Tensor& ids, const Tensor& weight);
// logits (N, C), targets (N) i64 -> mean loss, a scalar. label_smoothing as PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing = 0.0f);

}  // namespace packrat::ops
