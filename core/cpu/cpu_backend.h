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

  // ---- elementwise and reductions (cpu_backend_elementwise.cpp)

  // ---- softmax, cross-entropy, layernorm (cpu_backend_rows.cpp)

  // ---- dropout and embedding (cpu_backend_dropout.cpp)

  // ---- shape ops (cpu_backend_shape.cpp)

  // ---- optimizer updates (cpu_backend_optim.cpp)
};

CpuBackend& cpu_backend();

}  // namespace packrat::cpu
