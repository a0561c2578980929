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
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/adaptive_window.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "core/copy_engine.h"

namespace packrat {

// ---------------------------------------------------------------- geometry (device-agnostic)

struct ConvGeometry {
  int64_t N, Cin, H, W, Cout, KH, KW, OH, OW;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  bool has_bias;
  // The dtype of x, y and gy in the kernels: f32, or a 16-bit dtype the backend conv_computes_in (the
  // weight stays f32 and is read converted; the gradients dx, gw and gb are f32).
  DType dtype = DType::f32;
  double flops() const { return 2.0 * N * Cout * OH * OW * (Cin / groups) * KH * KW; }  // per pass
  std::string key() const;
};

// Auto lets a backend pick the fastest algorithm (Winograd on the CPU, at the price of a larger
// Workspace); Direct keeps memory lowest; Deterministic takes only algorithms that give the same
// bits run after run (on CUDA, cuDNN's deterministic ones; the CPU's oneDNN convolutions are
// deterministic anyway, so there it is Auto). Process-wide; every backend reads it.
enum class ConvAlgorithm { Auto, Direct, Deterministic };
void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm_setting();

struct PoolGeometry {
  int64_t N, C, H, W, OH, OW, KH, KW, stride_h, stride_w, pad_h, pad_w;
};
enum class PoolKind { Max, AvgIncludePadding, AvgExcludePadding };

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

// cross_entropy's ignore_index when no target is ignored (a target this low is out of range).
constexpr int64_t kNoIgnoreIndex = std::numeric_limits<int64_t>::min();

// ---------------------------------------------------------------- the interface

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;  // "cpu (oneDNN + OpenMP)"
  virtual Allocator& allocator() = 0;
  // Whether the convolution, matmul and attention kernels run natively in this 16-bit dtype
  // (core/autocast.h); f32 always. Where not, autocast's ops convert at the kernels' edges.
  virtual bool computes_in(DType dtype) const { return dtype == DType::f32; }
  // Whether the convolutions alone do (ConvGeometry::dtype): a backend whose other kernels convert at
  // their edges may still run its convolutions natively (CUDA: cuDNN's bf16 and f16 convolutions,
  // with PACKRAT_CUDA_CONV=half).
  virtual bool conv_computes_in(DType dtype) const { return computes_in(dtype); }
  // Side streams for copies between this device and host memory (core/copy_engine.h); null where
  // there is no second memory to move to (the CPU). Made on first use; lives as long as the backend.
  virtual CopyEngine* copy_engine() { return nullptr; }

  // ---- memory: copy, fill, reorder, convert
  // dst = src, same shape, dtype and layout; one side may be on the CPU (host <-> device copy).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, double value) = 0;  // every element, any dtype
  // t in `layout` (t itself when already there); tag from the TagScope.
  virtual Tensor to_layout(const Tensor& t, Layout layout) = 0;
  // dst = static_cast<dst dtype>(src), same shape and layout.
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  // dst[dst_offset + i] = src[src_offset + i] for i < count: plain tensors of one dtype, both on
  // this device, the ranges inside each buffer (data-parallel gradient buckets).
  virtual void copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) = 0;

  // ---- convolution (ops/conv2d)
  // Weights are (Cout, Cin/groups, KH, KW) tensors, plain or in conv_weight_layout(); biases
  // (Cout) or undefined; the backend may keep a prepared copy of a weight (keep_weights) keyed by
  // its storage and version.
  // The layout a convolution weight parameter is kept in on this backend: the one its
  // convolutions read, so that a step reorders no weight and no weight gradient (PyTorch's
  // channels_last model). Plain unless a backend says otherwise (the CUDA backend: NHWC).
  virtual Layout conv_weight_layout() const { return Layout::Plain; }
  // x (N, Cin, H, W), any layout -> x in the layout conv_forward reads for g (x itself when it is
  // already so). The op saves this form for the weight gradient, so backward needs no reorder.
  virtual Tensor conv_input(const Tensor& x, const ConvGeometry& g) = 0;
  // x (N, Cin, H, W) any layout -> y (N, Cout, OH, OW) in the layout this backend prefers for g.
  // keep_weights: w will be used again unchanged (eval, or frozen), so a prepared copy may be kept.
  virtual Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                              bool keep_weights) = 0;
  // gy (N, Cout, OH, OW) f32, any layout -> the output gradient as this backend's backward kernels
  // for g read it, in g.dtype; the op hands it to both. Default: gy in g.dtype. The CPU's AMX
  // kernels read it channels-last (Layout::NHWC): gy converted as it lies where the activations
  // are channels-last, else a channels-last copy made in one pass.
  virtual Tensor conv_grad_output(const Tensor& gy, const ConvGeometry& g) { return gy.to(g.dtype); }
  // gy (N, Cout, OH, OW) any layout -> dx (N, Cin, H, W) in a layout of the backend's choice.
  virtual Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) = 0;
  // into += conv_backward_data(gy, w, g), in place, and returns into (N, Cin, H, W): the gradient
  // of an input that already has one (a residual block's input). The CUDA backend blends it in
  // cuDNN's output (beta = 1), a pass and a kernel fewer than a separate add. Default: the
  // gradient, then accumulate().
  virtual Tensor conv_backward_data_into(const Tensor& gy, const Tensor& w, const ConvGeometry& g, Tensor& into);
  // x (N, Cin, H, W), gy (N, Cout, OH, OW) any layouts -> gw (Cout, Cin/groups, KH, KW) in
  // conv_weight_layout() and, when g.has_bias, gb (Cout).
  virtual void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                                     Tensor& gb) = 0;
  // The dtype conv_backward_weights computes in for g: g.dtype, or f32 where this backend forms a
  // 16-bit convolution's weight gradient with f32 kernels on the 16-bit values (the CPU's strided
  // and depthwise ones). The op then loads x and takes gy in f32 as they are, instead of 16-bit
  // copies the kernel would convert again (two more Workspace buffers at the backward's peak).
  virtual DType conv_weight_gradient_dtype(const ConvGeometry& g) { return g.dtype; }

  // ---- matmul (ops/linear)
  // Batched c = op(a) @ op(b) (+ bias) on plain tensors, op() an optional transpose read in place:
  // a holds (batch, M, K) row-major, or (batch, K, M) when trans_a; b holds (batch, K, N), or
  // (batch, N, K) when trans_b; bias (N) or undefined -> c (batch, M, N) plain, shaped `out`, of
  // dtype c_dtype. a and b are f32, or 16-bit in a dtype the backend computes_in (one of them may
  // then be f32, a weight: it is read converted); the bias is f32.
  virtual Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M,
                        int64_t K, int64_t N, const Tensor& bias, const Shape& out, DType c_dtype = DType::f32) = 0;
  // m (M, N) plain -> (N) column sums, accumulated in double.
  virtual Tensor column_sums(const Tensor& m, int64_t M, int64_t N) = 0;

  // ---- batchnorm (ops/batchnorm)
  // Whether the batchnorm kernels read x in this 16-bit dtype (y then in it too; gradients f32),
  // instead of an f32 copy of it (autocast at the kernels' edges).
  virtual bool batchnorm_reads(DType dtype) const { return dtype == DType::f32; }
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
  // A training step's bookkeeping, in place, in one pass (one kernel on a GPU): both running
  // statistics from the batch's (all (C) f32): running = (1 - momentum) * running + momentum *
  // correction * batch, in double, with correction 1 for the mean and var_correction (n / (n - 1)
  // makes the variance unbiased) for the variance; and num_batches_tracked (an i64 scalar, or
  // null) += 1. Does not bump the versions.
  virtual void batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                        const Tensor& mean, const Tensor& var, float momentum,
                                        double var_correction) = 0;

  // ---- pooling (ops/pool)
  // Whether pool_forward reads x in this 16-bit dtype (y then in it too; gradients f32), instead of
  // an f32 copy of it (autocast at the kernels' edges).
  virtual bool pool_reads(DType dtype) const { return dtype == DType::f32; }
  // x (N, C, H, W) any layout, f32 or a 16-bit dtype pool_reads -> y (N, C, OH, OW) in x's layout
  // and dtype. With `argmax` (max pooling for training) it also returns, for each output, the
  // index of the maximum within its window (row-major in the KH x KW window), dtype
  // pool_index_dtype(KH * KW), shaped and laid out as y.
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
  // PyTorch's adaptive windows (core/adaptive_window.h, which the CUDA kernels share): output i
  // of `out` covers inputs [begin, end) of `in`, begin = floor(i * in / out), end = ceil((i + 1) * in / out).
  static constexpr int64_t adaptive_window_begin(int64_t i, int64_t in, int64_t out) {
    return packrat::adaptive_window_begin(i, in, out);
  }
  static constexpr int64_t adaptive_window_end(int64_t i, int64_t in, int64_t out) {
    return packrat::adaptive_window_end(i, in, out);
  }

  // ---- pointwise activations (ops/activation, stores)
  // x and saved are f32, or 16-bit in a dtype the backend computes_in (y then in x's dtype; d and
  // gx f32).
  // y = f(x): x (any shape, any layout) -> y, same shape and layout.
  virtual Tensor pointwise_forward(ActivationId fn, const Tensor& x) = 0;
  // d = f'(x) from the saved x, or with from_output from the saved y = f(x) (relu, sigmoid and
  // tanh only: Pointwise::derivative_from_output): saved f32 any layout -> d, same shape and layout.
  virtual Tensor pointwise_derivative(ActivationId fn, const Tensor& saved, bool from_output) = 0;
  // gx = grad * f'(x), fused (f' never stored): saved (x, or y with from_output) and grad f32 of
  // the same numel and layout -> gx like grad.
  virtual Tensor pointwise_backward(ActivationId fn, const Tensor& saved, const Tensor& grad, bool from_output) = 0;

  // ---- elementwise and reductions (ops/elementwise, tape, stores, optimizers)
  // Whether binary() takes two operands of this 16-bit dtype as they lie (computing in f32, out in
  // it, rounded as in_dtype rounds), instead of f32 copies of both (autocast at the kernels' edges).
  virtual bool binary_reads(DType dtype) const { return dtype == DType::f32 || dtype == DType::f64; }
  // out = a op b, f32 or f64, or a 16-bit dtype binary_reads (both the same dtype; out in it).
  // Same shape: over the buffers as they lie, b reordered to a's layout first, out in a's layout.
  // Other shapes broadcast numpy-style (trailing dims aligned, size-1 dims stretched: (N, C, 1, 1)
  // x (N, C, H, W)); blocked operands are read as plain and out is plain, of the broadcast shape.
  virtual Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) = 0;
  // out = a * s: a f32 or f64, any layout -> out like a.
  virtual Tensor scale(const Tensor& a, double s) = 0;
  // dst += src in place: same shape and dtype (f32 or f64); src reordered to dst's layout.
  virtual void accumulate(Tensor& dst, const Tensor& src) = 0;
  // sum x[i] and sum x[i]^2 over all elements of an f32 tensor (any layout), in double.
  virtual double reduce_sum(const Tensor& x) = 0;
  virtual double reduce_sum_squares(const Tensor& x) = 0;
  // The reverse of broadcasting: x f32 or f64 summed over the dims where `shape` (which x broadcasts
  // from) has size 1 or is missing, e.g. (R, D) -> (D) column sums, (N, C, H, W) -> (N, C, 1, 1).
  // Plain out of `shape` in x's dtype; double accumulators.
  virtual Tensor reduce_sum_to(const Tensor& x, const Shape& shape) = 0;
  // reduce_sum_to(g * a, shape): a product's gradient for its broadcast operand (squeeze-and-
  // excitation's scale, (N, C, 1, 1) from (N, C, H, W)). g f32, a f32 or 16-bit (its values), same
  // shape. Default: the product, then its sum; a backend may sum without the product's tensor.
  virtual Tensor reduce_sum_of_product_to(const Tensor& g, const Tensor& a, const Shape& shape);

  // ---- softmax, cross-entropy, layernorm (ops/softmax, ops/cross_entropy, ops/layernorm)
  // Every row primitive works on the last dim of plain tensors (..., D) (R rows of D), f32 unless
  // said otherwise; statistics and gradients are f32.
  // Whether softmax and layernorm read, and write, their data (softmax's x and y, layernorm's x
  // and y) in this 16-bit dtype, computing in f32 on its values, instead of f32 copies of it
  // (autocast at the kernels' edges).
  virtual bool rows_read(DType dtype) const { return dtype == DType::f32; }
  // y = softmax(scale * x) per row: x (..., D) f32 or a rows_read dtype -> y (..., D) in `out` (f32
  // or a rows_read dtype: the f32 result rounded to it). The scale is attention's, so that its
  // scores need no pass of their own.
  virtual Tensor softmax_forward(const Tensor& x, float scale, DType out) = 0;
  // Its gradient with respect to x: dx = scale * y * (g - sum(g * y)) per row (each product rounded
  // to f32): y (..., D) f32 or a rows_read dtype, grad (..., D) f32 -> dx (..., D) in `out`.
  virtual Tensor softmax_backward(const Tensor& y, const Tensor& grad, float scale, DType out) = 0;
  // Cross-entropy from logits (N, C) and targets (N) i64, label smoothing eps, and PyTorch's
  // ignore_index: a sample whose target equals ignore_index (kNoIgnoreIndex: none does) counts
  // for nothing. Over the M others,
  // loss = mean_n [(1 - eps) (-log p[n, t_n]) + eps mean_c(-log p[n, c])], a scalar () f32, and
  // 0 when M = 0 (every target ignored; PyTorch gives NaN there); count = M, on the host.
  // probs (N, C) = softmax(logits) when want_probs (every row, ignored ones too). Throws
  // "cross_entropy <layer>: target .. of sample .. is out of range [0, C)" on a bad target.
  struct CrossEntropyOut {
    Tensor loss, probs;
    int64_t count = 0;  // targets not ignored
  };
  virtual CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                                                bool want_probs, int64_t ignore_index) = 0;
  // dlogits = (probs - q) * grad_loss / count, q = (1 - eps) onehot(t) + eps / C, and 0 in the
  // rows of ignored targets: probs (N, C), targets (N) i64, grad_loss a one-element f32 or f64,
  // count the forward's CrossEntropyOut::count (0: every row is ignored) -> (N, C).
  virtual Tensor cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                        const Tensor& grad_loss, int64_t ignore_index, int64_t count) = 0;
  // y = (x - mean) * rstd * weight + bias per row (biased variance, rstd = 1 / sqrt(var + eps));
  // x (..., D) f32 or a rows_read dtype, weight and bias (D) or undefined -> y (..., D) in x's
  // dtype, mean and rstd (R).
  struct LayerNormOut {
    Tensor y, mean, rstd;
  };
  virtual LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) = 0;
  // With xhat = (x - mean) * rstd, gh = grad * weight: dx = rstd (gh - mean(gh) - xhat mean(gh xhat))
  // (..., D); dweight = sum_rows grad * xhat and dbias = sum_rows grad (D) when asked for. x f32 or
  // a rows_read dtype.
  struct LayerNormGrads {
    Tensor dx, dweight, dbias;
  };
  virtual LayerNormGrads layernorm_backward(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                            const Tensor& weight, const Tensor& grad, bool want_dweight,
                                            bool want_dbias) = 0;

  // ---- dropout and embedding (ops/dropout, ops/embedding)
  // Whether dropout_forward and mask_scale read x (grad) in this 16-bit dtype and write y in it,
  // computing in f32 on its values, instead of an f32 copy of it (autocast at the kernels' edges).
  virtual bool dropout_reads(DType dtype) const { return dtype == DType::f32; }
  // Inverted dropout: element i = 256 b + r is kept where the uniform of word r / 64 of
  // Philox(seed, stream, counter 64 b + r % 64) is >= p; y = keep ? x * scale : 0. x f32 or a
  // dropout_reads dtype, any layout -> y like x; *mask (when mask is non-null) = keep as u8 0/1,
  // like x.
  virtual Tensor dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream,
                                 Tensor* mask) = 0;
  // out = mask ? grad * scale : 0: grad f32 (or a dropout_reads dtype: attention's dropped P) and
  // mask u8 of the same numel and layout -> out like grad.
  virtual Tensor mask_scale(const Tensor& grad, const Tensor& mask, float scale) = 0;
  // Fills plain f32 t from Philox(seed, stream): block b (4 values) from counter + b; uniform in
  // [lo, hi), or normal(mean, std) by Box-Muller on word pairs. Returns the blocks used.
  virtual int64_t fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) = 0;
  virtual int64_t fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) = 0;
  // y[i, :] = weight[ids[i], :]: weight (num, D) f32, ids (N...) i64 -> y (N..., D). Throws
  // "embedding <layer>: id .. at position .. is out of range [0, num)" on a bad id.
  virtual Tensor embedding_forward(const Tensor& weight, const Tensor& ids) = 0;
  // dweight[ids[i], :] += grad[i, :] (ids may repeat): grad (N..., D), ids (N...) -> (num, D).
  virtual Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) = 0;

  // ---- shape ops (ops/shape_ops, layers)
  // x (..., M, N) any dtype -> (..., N, M) plain (a copy; a blocked x is read as plain).
  virtual Tensor transpose_last2(const Tensor& x) = 0;
  // The option-A shortcut: y[n, c + (Cout - Cin) / 2, h, w] = x[n, c, h * stride, w * stride],
  // zero in the padded channels: x (N, Cin, H, W) f32 any layout -> y (N, Cout, ceil(H / stride),
  // ceil(W / stride)) in a layout of the backend's choosing.
  virtual Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) = 0;
  // Its backward: grad (N, Cout, Ho, Wo) -> gx of x_shape (N, Cin, H, W) in x_layout, zero where
  // the forward did not read.
  virtual Tensor pad_channels_subsample_backward(const Tensor& grad, const Shape& x_shape, Layout x_layout,
                                                 int64_t stride) = 0;
  // General axis permutation: x (d_0, ..., d_{r-1}) any dtype -> y (d_perm[0], ..., d_perm[r-1])
  // plain, y[i_0, ..., i_{r-1}] = x[j] with j_perm[k] = i_k (torch.permute, then .contiguous()).
  // A blocked x is read as plain.
  virtual Tensor permute(const Tensor& x, std::span<const int64_t> perm) = 0;
  // torch.cat: xs plain or blocked, one dtype, equal in every dim but `dim` -> their
  // concatenation along `dim`, plain.
  virtual Tensor concat(std::span<const Tensor> xs, int64_t dim) = 0;
  // torch.narrow(x, dim, start, length).contiguous(): x any dtype -> plain copy of the slice.
  virtual Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) = 0;
  // Causal attention mask, in place: scores (..., T, S) plain f32 with T <= S; element (i, j) of
  // each (T, S) matrix becomes -inf where j > i + (S - T) (a query sees keys up to its own position).
  virtual void causal_mask_fill(Tensor& scores) = 0;
  // Key padding, in place: scores (B, ..., T, S) plain f32; element (b, ..., i, j) becomes -inf
  // where j >= key_lengths[b]. key_lengths (B) i64 on the scores' device; a length is read clamped
  // to [1, S] (every query keeps at least its first key, so no softmax row is all -inf).
  virtual void key_padding_fill(Tensor& scores, const Tensor& key_lengths) = 0;
  // The unpadded length of each sequence: tokens (N, T) i64 -> (N) i64, the position of the first
  // `pad` token of row n (T when it has none), at least 1.
  virtual Tensor sequence_lengths(const Tensor& tokens, int64_t pad) = 0;

  // ---- memory-efficient attention (ops/attention, model.attention: memory_efficient)
  // FlashAttention-2 (Dao, arXiv 2307.08691): the scores are computed in tiles of keys with an
  // online max and sum, and never kept; backward recomputes each tile's probabilities from the
  // per-row log-sum-exp. Over G = B * H heads, sample-major: q (G, T, E), k (G, S, E), v (G, S, Ev)
  // plain f32. s_ij = scale q_i . k_j, masked (-inf) where `causal` and j > i + (S - T), and where
  // j >= key_lengths[g / H] (key_lengths (B) i64 on the device, read clamped to [1, S] as
  // key_padding_fill does; undefined: no padding, H unused). P = softmax_j(s); with dropout_p > 0,
  // Pd = P * keep / (1 - dropout_p) with keep drawn as dropout_forward(seed, stream) draws it for the
  // (G, T, S) tensor P (element (g, i, j) = (g T + i) S + j), so a mask is the standard path's.
  // y = Pd v. q, k, v (and backward's y) are f32 or all of one 16-bit dtype the backend
  // attention_reads; y is written in q's dtype, the f32 result rounded.
  // Whether attention_forward / attention_backward read q, k, v and y of this dtype as it lies.
  virtual bool attention_reads(DType dtype) const { return dtype == DType::f32; }
  struct AttentionArgs {
    int64_t T = 0, S = 0, E = 0, Ev = 0, heads = 1;  // heads H: G / B when key_lengths is defined
    float scale = 1.0f;
    bool causal = false;
    float dropout_p = 0.0f;
    uint64_t seed = 0, stream = 0;
  };
  struct AttentionOut {
    Tensor y;    // (G, T, Ev)
    Tensor lse;  // (G, T) f32: log sum_j exp(s_ij) over the unmasked keys
  };
  virtual AttentionOut attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_lengths,
                                         const AttentionArgs& a) = 0;
  // The gradients from what forward saved (q, k, v, y, lse) and grad (G, T, Ev): dq (G, T, E),
  // dk (G, S, E), dv (G, S, Ev), each only when asked for (undefined otherwise).
  struct AttentionGrads {
    Tensor dq, dk, dv;
  };
  virtual AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                            const Tensor& lse, const Tensor& grad, const Tensor& key_lengths,
                                            const AttentionArgs& a, bool want_dq, bool want_dk, bool want_dv) = 0;

  // ---- optimizer updates (optim)
  // One fused SGD step over param, grad (and the momentum buffer), f32 of one layout, as PyTorch:
  // d = g + wd p; buf = first ? d : momentum buf + (1 - dampening) d; p -= lr (nesterov ?
  // d + momentum buf : buf). With momentum 0 (buf undefined): p -= lr d.
  struct SgdStep {
    float lr, weight_decay, momentum, dampening;
    bool nesterov, first;
  };
  virtual void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) = 0;
  // The same step for several parameters at once (PyTorch's fused SGD), each entry with its own
  // `first` and momentum buffer (null with momentum 0), as sgd_update on each; a backend may take
  // them in one launch (the CUDA backend: one kernel for up to 40). Default: sgd_update on each.
  struct SgdOperands {
    Tensor* param;
    const Tensor* grad;
    Tensor* momentum_buffer;
    bool first;
  };
  virtual void sgd_update_many(std::span<const SgdOperands> operands, const SgdStep& s);
  // One fused AdamW step, as PyTorch: p *= decay; m += (g - m)(1 - b1); v = b2 v + (1 - b2) g^2;
  // p -= step_size m / (sqrt(v) / bc2_sqrt + eps). param, grad, m, v f32 of one layout.
  struct AdamWStep {
    float decay, beta1, beta2, step_size, bc2_sqrt, eps;
  };
  virtual void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) = 0;
};

// The backend of a device. The CPU's always exists; asking for a device that this build or
// machine does not have throws packrat::Error saying why ("packrat was built without CUDA").
Backend& backend(Device device);
inline Backend& backend_of(const Tensor& t) { return backend(t.device()); }

// The dtype the kernels of `be` compute in for data of this dtype: itself where the backend
// computes_in it, else f32 (autocast at the kernels' edges, core/autocast.h).
inline DType kernel_dtype(const Backend& be, DType data) { return be.computes_in(data) ? data : DType::f32; }
// t as the kernels of `be` read it: t itself, or its f32 values where t is 16-bit in a dtype the
// backend does not compute in (the CPU's pointwise kernels take bf16 where it computes in bf16).
inline Tensor kernel_operand(const Backend& be, const Tensor& t) {
  return t.defined() && is_half(t.dtype()) && !be.computes_in(t.dtype()) ? t.to(DType::f32) : t;
}

// t as the row kernels of `be` read it (Backend::rows_read): t itself, or its f32 values.
inline Tensor rows_operand(const Backend& be, const Tensor& t) {
  return t.defined() && is_half(t.dtype()) && !be.rows_read(t.dtype()) ? t.to(DType::f32) : t;
}
// The dtype the row kernels of `be` write for data of this dtype: itself where they read it, else f32.
inline DType rows_dtype(const Backend& be, DType data) { return be.rows_read(data) ? data : DType::f32; }

// The dtype attention_forward of `be` reads and writes for data of this dtype: itself where it
// attention_reads it, else f32.
inline DType attention_dtype(const Backend& be, DType data) { return be.attention_reads(data) ? data : DType::f32; }

// Every backend available in this process (the CPU first), for tests that cover them all.
std::vector<Backend*> available_backends();

// Throws unless copy_range's operands are on one device, of one dtype, plain, and the ranges fit.
void check_copy_range(const Tensor& src, int64_t src_offset, const Tensor& dst, int64_t dst_offset, int64_t count);

// The checks attention_forward / attention_backward share on every backend: q (G, T, E),
// k (G, S, E), v (G, S, Ev) in any shape of those sizes, of one dtype `be` attention_reads, and key
// lengths, when given, i64, one per sample of a.heads heads. Returns G. `what` starts every message.
int64_t check_attention_operands(const char* what, const Backend& be, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& key_lengths, const Backend::AttentionArgs& a);
// attention_backward's saved output y (G, T, Ev) in q's dtype `data`, its f32 gradient (G, T, Ev),
// and the f32 log-sum-exp (G, T).
void check_attention_outputs(const Tensor& y, const Tensor& lse, const Tensor& grad, DType data, int64_t G,
                             const Backend::AttentionArgs& a);
// key_padding_fill's operands: plain f32 scores (B, ..., T, S) and (B) i64 key lengths. Returns
// the score rows per sample.
int64_t check_key_padding(const Tensor& scores, const Tensor& key_lengths);

// Throws unless batchnorm_update_running's four statistics are (C) f32 tensors of one size and the
// counter, when given, an i64 scalar.
void check_running_update(const Tensor& running_mean, const Tensor& running_var, const Tensor* num_batches_tracked,
                          const Tensor& mean, const Tensor& var);

// Throws "<op> <layer>: input 0 is on cuda:0, input 1 on cpu" unless all defined tensors share a device.
void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors);

}  // namespace packrat
