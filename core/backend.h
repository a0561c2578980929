#pragma once
// The primitive table: every piece of arithmetic an op, the tape, a store, an optimizer or a
// layer needs, behind one interface per device. `backend(t.device())` dispatches. Op files keep
// what only they know (checks, what they save, their backward rule) and call these for the
// numbers; they never include oneDNN or cuDNN and never loop over data<float>().
//
// Contracts shared by every primitive:
// - Inputs and outputs live on this backend's device (the op checks that operands agree:
//   check_same_device below). A primitive that returns a tensor allocates it on this device
//   under the thread's TagScope / LayerScope.
// - 4-d tensors may come in any layout this backend produces (Tensor::layout()); a primitive
//   documents the layout of what it returns. Elementwise primitives work on buffers as they
//   lie and keep the first operand's layout.
// - f32 unless a dtype is named.
//
// ggml's backend interface and test-backend-ops are the model: tests/core/backend_test.cpp runs
// every primitive of every available backend against a slow scalar reference.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace packrat {

// ---------------------------------------------------------------- geometry (device-agnostic)

struct ConvGeometry {
  int64_t N, Cin, H, W, Cout, KH, KW, OH, OW;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  bool has_bias;
  double flops() const { return 2.0 * N * Cout * OH * OW * (Cin / groups) * KH * KW; }  // per pass
  std::string key() const;
};

// Auto lets a backend pick the fastest algorithm (Winograd on the CPU, at the price of a larger
// Workspace); Direct keeps memory lowest. Process-wide; every backend reads it.
enum class ConvAlgorithm { Auto, Direct };
void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm_setting();

struct PoolGeometry {
  int64_t N, C, H, W, OH, OW, KH, KW, stride_h, stride_w, pad_h, pad_w;
};
enum class PoolKind { Max, AvgIncludePadding, AvgExcludePadding };

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

// ---------------------------------------------------------------- the interface

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;  // "cpu (oneDNN + OpenMP)"
  virtual Allocator& allocator() = 0;

  // ---- memory: copy, fill, reorder, convert
  // dst = src, same shape, dtype and layout; one side may be on the CPU (host <-> device copy).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, double value) = 0;  // every element, any dtype
  // t in `layout` (t itself when already there); tag from the TagScope.
  virtual Tensor to_layout(const Tensor& t, Layout layout) = 0;
  // dst = static_cast<dst dtype>(src), same shape and layout.
  virtual void convert(const Tensor& src, Tensor& dst) = 0;

  // ---- convolution (ops/conv2d)
  // Weights are plain (Cout, Cin/groups, KH, KW) tensors, biases (Cout) or undefined; the
  // backend may keep a prepared copy of a weight (keep_weights) keyed by its storage and version.
  // x (N, Cin, H, W), any layout -> x in the layout conv_forward reads for g (x itself when it is
  // already so). The op saves this form for the weight gradient, so backward needs no reorder.
  virtual Tensor conv_input(const Tensor& x, const ConvGeometry& g) = 0;
  // x (N, Cin, H, W) any layout -> y (N, Cout, OH, OW) in the layout this backend prefers for g.
  // keep_weights: w will be used again unchanged (eval, or frozen), so a prepared copy may be kept.
  virtual Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                              bool keep_weights) = 0;
  // gy (N, Cout, OH, OW) any layout -> dx (N, Cin, H, W) in a layout of the backend's choice.
  virtual Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) = 0;
  // x (N, Cin, H, W), gy (N, Cout, OH, OW) any layouts -> gw (Cout, Cin/groups, KH, KW) plain and,
  // when g.has_bias, gb (Cout).
  virtual void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                                     Tensor& gb) = 0;

  // ---- matmul (ops/linear)
  // Batched c = op(a) @ op(b) (+ bias) on plain tensors, op() an optional transpose read in place:
  // a holds (batch, M, K) row-major, or (batch, K, M) when trans_a; b holds (batch, K, N), or
  // (batch, N, K) when trans_b; bias (N) or undefined -> c (batch, M, N) plain, shaped `out`.
  virtual Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M,
                        int64_t K, int64_t N, const Tensor& bias, const Shape& out) = 0;
  // m (M, N) plain -> (N) column sums, accumulated in double.
  virtual Tensor column_sums(const Tensor& m, int64_t M, int64_t N) = 0;

  // ---- batchnorm (ops/batchnorm)
  // x (N, C, H, W) any layout; weight (scale) and bias (shift) (C) each, or undefined; outputs
  // keep x's layout. Variances are biased (divided by N*H*W).
  // Training: y, and the batch statistics mean (C) and var (C).
  virtual void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                          Tensor& y, Tensor& mean, Tensor& var) = 0;
  // Inference with given statistics mean, var (C) -> y.
  virtual Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                             const Tensor& mean, const Tensor& var, float eps) = 0;
  // gy (N, C, H, W) any layout -> dx (x's layout), and dweight / dbias (C) when weight is defined /
  // has_bias. global_stats: mean and var were constants (eval mode), not functions of x.
  virtual void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias,
                                  const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                                  Tensor& dweight, Tensor& dbias) = 0;
  // In place, running and batch (C): running = (1 - momentum) * running + momentum * correction *
  // batch, in double (correction n / (n - 1) makes a variance unbiased). Does not bump the version.
  virtual void batchnorm_update_running(Tensor& running, const Tensor& batch, float momentum,
                                        double correction) = 0;
  // In place, num_batches_tracked (i64 scalar) += 1. Does not bump the version.
  virtual void batchnorm_count_batch(Tensor& num_batches_tracked) = 0;

  // ---- pooling (ops/pool)
  // x (N, C, H, W) any layout -> y (N, C, OH, OW) in x's layout. With `argmax` (max pooling for
  // training) it also returns, for each output, the index of the maximum within its window
  // (row-major in the KH x KW window), dtype pool_index_dtype(KH * KW), shaped and laid out as y.
  virtual Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) = 0;
  // gy (N, C, OH, OW) any layout, argmax (max pooling: as pool_forward returned it, in `layout`)
  // -> dx (N, C, H, W) in `layout`.
  virtual Tensor pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                               Layout layout) = 0;
  // The dtype of max pooling's argmax for a window of `window` elements.
  virtual DType pool_index_dtype(int64_t window) = 0;
  // Adaptive average pooling with PyTorch's windows (adaptive_window_begin/end), for any
  // sizes: x (N, C, H, W) any layout -> y (N, C, OH, OW) in x's layout.
  virtual Tensor adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) = 0;
  // gy (N, C, OH, OW) any layout -> dx (N, C, H, W) = x_shape, in `layout`.
  virtual Tensor adaptive_avgpool_backward(const Tensor& gy, const Shape& x_shape, Layout layout) = 0;
  // PyTorch's adaptive windows: output i of `out` covers inputs [begin, end) of `in`,
  // begin = floor(i * in / out), end = ceil((i + 1) * in / out).
  static constexpr int64_t adaptive_window_begin(int64_t i, int64_t in, int64_t out) { return i * in / out; }
  static constexpr int64_t adaptive_window_end(int64_t i, int64_t in, int64_t out) {
    return ((i + 1) * in + out - 1) / out;
  }

  // ---- pointwise activations (ops/activation, stores)

  // ---- elementwise and reductions (ops/elementwise, tape, stores, optimizers)

  // ---- softmax, cross-entropy, layernorm (ops/softmax, ops/cross_entropy, ops/layernorm)

  // ---- dropout and embedding (ops/dropout, ops/embedding)

  // ---- shape ops (ops/shape_ops, layers)

  // ---- optimizer updates (optim)
};

// The backend of a device. The CPU's always exists; asking for a device that this build or
// machine does not have throws packrat::Error saying why ("packrat was built without CUDA").
Backend& backend(Device device);
inline Backend& backend_of(const Tensor& t) { return backend(t.device()); }

// Every backend available in this process (the CPU first), for tests that cover them all.
std::vector<Backend*> available_backends();

// Throws "<op> <layer>: input 0 is on cuda:0, input 1 on cpu" unless all defined tensors share a device.
void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors);

}  // namespace packrat
