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

  // ---- memory: copy, fill, reorder, convert (cpu_backend_memory.cpp)
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  Tensor to_layout(const Tensor& t, Layout layout) override;
  void convert(const Tensor& src, Tensor& dst) override;

  // ---- convolution (cpu_backend_conv.cpp)

  // ---- matmul (cpu_backend_matmul.cpp)

  // ---- batchnorm (cpu_backend_batchnorm.cpp)

  // ---- pooling (cpu_backend_pool.cpp)

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

  // ---- softmax, cross-entropy, layernorm (cpu_backend_rows.cpp)
  Tensor softmax_forward(const Tensor& x) override;
  Tensor softmax_backward(const Tensor& y, const Tensor& grad) override;
  CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                                        bool want_probs) override;
  Tensor cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                const Tensor& grad_loss) override;
  LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  LayerNormGrads layernorm_backward(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                    const Tensor& grad, bool want_dweight, bool want_dbias) override;

  // ---- dropout and embedding (cpu_backend_dropout.cpp)
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

  // ---- optimizer updates (cpu_backend_optim.cpp)
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) override;
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) override;
};

CpuBackend& cpu_backend();

}  // namespace packrat::cpu
