#pragma once
// The CPU backend: oneDNN for convolution, matmul and pooling, OpenMP loops for the rest.
// The reference every other backend is tested against. Each section of the primitive table
// is implemented in its own file, core/cpu/cpu_backend_<section>.cpp.
#include "core/backend.h"

namespace packrat::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string_view name() const override { return "cpu (oneDNN + OpenMP)"; }
  Allocator& allocator() override { return Allocator::cpu(); }
  // bf16 where oneDNN has native bf16 kernels (AVX512_BF16 or AMX); f16 nowhere.
  bool computes_in(DType dtype) const override;
  bool batchnorm_reads(DType dtype) const override { return dtype == DType::f32 || is_half(dtype); }
  // bf16 everywhere: a residual block's addition under autocast read two f32 copies and wrote a
  // third (ResNet-50's forward peak at a large batch).
  bool binary_reads(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16;
  }
  // bf16 where oneDNN has native bf16 kernels: its jit pooling reads and writes it.
  bool pool_reads(DType dtype) const override {
    return dtype == DType::f32 || (dtype == DType::bf16 && computes_in(dtype));
  }

  // ---- memory: copy, fill, reorder, convert (cpu_backend_memory.cpp)
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) override;
  void fill(Tensor& t, double value) override;
  Tensor to_layout(const Tensor& t, Layout layout) override;
  void convert(const Tensor& src, Tensor& dst) override;

  // ---- convolution (cpu_backend_conv.cpp)
  Tensor conv_input(const Tensor& x, const ConvGeometry& g) override;
  Tensor conv_grad_output(const Tensor& gy, const ConvGeometry& g) override;
  Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                      bool keep_weights) override;
  Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) override;
  void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                             Tensor& gb) override;
  DType conv_weight_gradient_dtype(const ConvGeometry& g) override;

  // ---- matmul (cpu_backend_matmul.cpp)
  Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M, int64_t K,
                int64_t N, const Tensor& bias, const Shape& out, DType c_dtype = DType::f32) override;
  Tensor column_sums(const Tensor& m, int64_t M, int64_t N) override;

  // ---- batchnorm (cpu_backend_batchnorm.cpp)
  void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                  Tensor& mean, Tensor& var) override;
  Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                     const Tensor& var, float eps) override;
  void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                          const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight,
                          Tensor& dbias) override;
  void batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                const Tensor& mean, const Tensor& var, float momentum, double var_correction) override;

  // ---- pooling (cpu_backend_pool.cpp)
  Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) override;
  Tensor pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                       Layout layout) override;
  DType pool_index_dtype(int64_t window) override;
  Tensor adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) override;
  Tensor adaptive_avgpool_backward(const Tensor& gy, const Shape& x_shape, Layout layout) override;

  // ---- pointwise activations (cpu_backend_pointwise.cpp)
  Tensor pointwise_forward(ActivationId fn, const Tensor& x) override;
  Tensor pointwise_derivative(ActivationId fn, const Tensor& saved, bool from_output) override;
  Tensor pointwise_backward(ActivationId fn, const Tensor& saved, const Tensor& grad, bool from_output) override;

  // ---- elementwise and reductions (cpu_backend_elementwise.cpp)
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor scale(const Tensor& a, double s) override;
  void accumulate(Tensor& dst, const Tensor& src) override;
  double reduce_sum(const Tensor& x) override;
  double reduce_sum_squares(const Tensor& x) override;
  Tensor reduce_sum_to(const Tensor& x, const Shape& shape) override;
  Tensor reduce_sum_of_product_to(const Tensor& g, const Tensor& a, const Shape& shape) override;

  // ---- softmax, cross-entropy, layernorm (cpu_backend_rows.cpp)
  bool rows_read(DType dtype) const override;
  bool attention_reads(DType dtype) const override;
  Tensor softmax_forward(const Tensor& x, float scale, DType out) override;
  Tensor softmax_backward(const Tensor& y, const Tensor& grad, float scale, DType out) override;
  CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                                        bool want_probs, int64_t ignore_index) override;
  Tensor cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                const Tensor& grad_loss, int64_t ignore_index, int64_t count) override;
  LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  LayerNormGrads layernorm_backward(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                    const Tensor& grad, bool want_dweight, bool want_dbias) override;

  // ---- dropout and random fills (cpu_backend_random.cpp), embedding (cpu_backend_embedding.cpp)
  bool dropout_reads(DType dtype) const override;
  Tensor dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream, Tensor* mask) override;
  Tensor mask_scale(const Tensor& grad, const Tensor& mask, float scale) override;
  int64_t fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) override;
  int64_t fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) override;
  Tensor embedding_forward(const Tensor& weight, const Tensor& ids) override;
  Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) override;

  // ---- shape ops (cpu_backend_shape.cpp)
  Tensor transpose_last2(const Tensor& x) override;
  Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) override;
  Tensor pad_channels_subsample_backward(const Tensor& grad, const Shape& x_shape, Layout x_layout,
                                         int64_t stride) override;
  Tensor permute(const Tensor& x, std::span<const int64_t> perm) override;
  Tensor concat(std::span<const Tensor> xs, int64_t dim) override;
  Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) override;
  void causal_mask_fill(Tensor& scores) override;
  void key_padding_fill(Tensor& scores, const Tensor& key_lengths) override;
  Tensor sequence_lengths(const Tensor& tokens, int64_t pad) override;

  // ---- memory-efficient attention (cpu_backend_attention.cpp)
  AttentionOut attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_lengths,
                                 const AttentionArgs& a) override;
  AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                    const Tensor& lse, const Tensor& grad, const Tensor& key_lengths,
                                    const AttentionArgs& a, bool want_dq, bool want_dk, bool want_dv) override;

  // ---- optimizer updates (cpu_backend_optim.cpp)
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) override;
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) override;
};

CpuBackend& cpu_backend();

}  // namespace packrat::cpu
