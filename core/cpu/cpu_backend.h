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
  Tensor conv_input(const Tensor& x, const ConvGeometry& g) override;
  Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                      bool keep_weights) override;
  Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) override;
  void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                             Tensor& gb) override;

  // ---- matmul (cpu_backend_matmul.cpp)
  Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M, int64_t K,
                int64_t N, const Tensor& bias, const Shape& out) override;
  Tensor column_sums(const Tensor& m, int64_t M, int64_t N) override;

  // ---- batchnorm (cpu_backend_batchnorm.cpp)
  void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                  Tensor& mean, Tensor& var) override;
  Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                     const Tensor& var, float eps) override;
  void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                          const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight,
                          Tensor& dbias) override;
  void batchnorm_update_running(Tensor& running, const Tensor& batch, float momentum, double correction) override;
  void batchnorm_count_batch(Tensor& num_batches_tracked) override;

  // ---- pooling (cpu_backend_pool.cpp)
  Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) override;
  Tensor pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                       Layout layout) override;
  DType pool_index_dtype(int64_t window) override;
  Tensor adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) override;
  Tensor adaptive_avgpool_backward(const Tensor& gy, const Shape& x_shape, Layout layout) override;

  // ---- pointwise activations (cpu_backend_pointwise.cpp)

  // ---- elementwise and reductions (cpu_backend_elementwise.cpp)

  // ---- softmax, cross-entropy, layernorm (cpu_backend_rows.cpp)

  // ---- dropout and embedding (cpu_backend_dropout.cpp)

  // ---- shape ops (cpu_backend_shape.cpp)

  // ---- optimizer updates (cpu_backend_optim.cpp)
};

CpuBackend& cpu_backend();

}  // namespace packrat::cpu
