#pragma once
// CudaBackend: one per visible GPU. Each section of the primitive table is implemented in its own
// core/cuda/cuda_backend_<section>.cpp (host code: checks, allocation, the launch), with its
// kernels in <section>_kernels.cu over the PACKRAT_HD per-index bodies of core/cuda/kernels/
// (which the CPU tests run on the host), as the CPU backend splits core/cpu/.
#include <memory>
#include <mutex>

#include "core/backend.h"

namespace packrat::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  Device device() const override { return Device::cuda(index_); }
  std::string_view name() const override { return name_; }
  Allocator& allocator() override { return *allocator_; }
  // Side streams for copies to and from the host (core/cuda/cuda_copy_engine.h), made on first use.
  CopyEngine* copy_engine() override;
  // Every primitive has a kernel; the backend tests check each one against the CPU reference on a
  // machine with a GPU (they passed on an H100, scripts/device_check.sh).

  // ---- memory: copy, fill, reorder, convert (cuda_backend_memory.cpp)
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) override;
  void fill(Tensor& t, double value) override;
  Tensor to_layout(const Tensor& t, Layout layout) override;
  void convert(const Tensor& src, Tensor& dst) override;

  // ---- convolution on cuDNN (cuda_backend_conv.cpp)
  Layout conv_weight_layout() const override;  // activation_layout(): KRSC (NHWC) unless PACKRAT_CUDA_LAYOUT=nchw
  bool conv_computes_in(DType dtype) const override;  // f32; bf16 and f16 with PACKRAT_CUDA_CONV=half
  Tensor conv_input(const Tensor& x, const ConvGeometry& g) override;
  Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                      bool keep_weights) override;
  Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) override;
  Tensor conv_backward_data_into(const Tensor& gy, const Tensor& w, const ConvGeometry& g, Tensor& into) override;
  void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb) override;

  // ---- matmul on cuBLAS (cuda_backend_matmul.cpp)
  Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M, int64_t K,
                int64_t N, const Tensor& bias, const Shape& out, DType c_dtype = DType::f32) override;
  Tensor column_sums(const Tensor& m, int64_t M, int64_t N) override;

  // ---- batchnorm (cuda_backend_batchnorm.cpp)
  void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                  Tensor& mean, Tensor& var) override;
  Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                     const Tensor& var, float eps) override;
  void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                          const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight,
                          Tensor& dbias) override;
  void batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                const Tensor& mean, const Tensor& var, float momentum, double var_correction) override;

  // ---- pooling (cuda_backend_pool.cpp)
  Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) override;
  Tensor pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                       Layout layout) override;
  DType pool_index_dtype(int64_t window) override;
  Tensor adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) override;
  Tensor adaptive_avgpool_backward(const Tensor& gy, const Shape& x_shape, Layout layout) override;

  // ---- pointwise activations (cuda_backend_pointwise.cpp)
  Tensor pointwise_forward(ActivationId fn, const Tensor& x) override;
  Tensor pointwise_derivative(ActivationId fn, const Tensor& saved, bool from_output) override;
  Tensor pointwise_backward(ActivationId fn, const Tensor& saved, const Tensor& grad, bool from_output) override;

  // ---- elementwise and reductions (cuda_backend_elementwise.cpp)
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor scale(const Tensor& a, double s) override;
  void accumulate(Tensor& dst, const Tensor& src) override;
  double reduce_sum(const Tensor& x) override;
  double reduce_sum_squares(const Tensor& x) override;
  Tensor reduce_sum_to(const Tensor& x, const Shape& shape) override;

  // ---- softmax, cross-entropy, layernorm (cuda_backend_rows.cpp)
  Tensor softmax_forward(const Tensor& x, float scale, DType out) override;
  Tensor softmax_backward(const Tensor& y, const Tensor& grad, float scale, DType out) override;
  CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                                        bool want_probs, int64_t ignore_index) override;
  Tensor cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                const Tensor& grad_loss, int64_t ignore_index, int64_t count) override;
  LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  LayerNormGrads layernorm_backward(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                    const Tensor& grad, bool want_dweight, bool want_dbias) override;

  // ---- dropout and random fills (cuda_backend_random.cpp), embedding (cuda_backend_embedding.cpp)
  Tensor dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream, Tensor* mask) override;
  Tensor mask_scale(const Tensor& grad, const Tensor& mask, float scale) override;
  int64_t fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) override;
  int64_t fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) override;
  Tensor embedding_forward(const Tensor& weight, const Tensor& ids) override;
  Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) override;

  // ---- shape ops (cuda_backend_shape.cpp)
  Tensor transpose_last2(const Tensor& x) override;
  Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) override;
  Tensor pad_channels_subsample_backward(const Tensor& grad, const Shape& x_shape, Layout x_layout,
                                         int64_t stride) override;
  Tensor permute(const Tensor& x, std::span<const int64_t> perm) override;
  Tensor concat(std::span<const Tensor> xs, int64_t dim) override;
  Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) override;
  void causal_mask_fill(Tensor& scores) override;

  // ---- attention: memory-efficient attention, key padding, sequence lengths (cuda_backend_attention.cpp)
  void key_padding_fill(Tensor& scores, const Tensor& key_lengths) override;
  Tensor sequence_lengths(const Tensor& tokens, int64_t pad) override;
  AttentionOut attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_lengths,
                                 const AttentionArgs& a) override;
  AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                    const Tensor& lse, const Tensor& grad, const Tensor& key_lengths,
                                    const AttentionArgs& a, bool want_dq, bool want_dk, bool want_dv) override;

  // ---- optimizer updates (cuda_backend_optim.cpp)
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) override;
  void sgd_update_many(std::span<const SgdOperands> operands, const SgdStep& s) override;
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) override;

 private:
  void run_conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g, Tensor& dx, float beta);

  int index_;
  std::string name_;
  std::unique_ptr<Allocator> allocator_;
  std::once_flag copy_engine_once_;
  std::unique_ptr<CopyEngine> copy_engine_;
};

// An optional f32 operand or output of a primitive: its device buffer, or null when undefined.
inline float* f32_or_null(const Tensor& t) { return t.defined() ? t.device_data<float>() : nullptr; }

}  // namespace packrat::cuda
