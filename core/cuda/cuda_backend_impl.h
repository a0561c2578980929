#pragma once
// CudaBackend: one per visible GPU. Each section of the primitive table is implemented in its
// own core/cuda/cuda_backend_<section>.cu, as the CPU backend does.
#include <memory>

#include "core/backend.h"

namespace packrat::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  Device device() const override { return Device::cuda(index_); }
  std::string_view name() const override { return name_; }
  Allocator& allocator() override { return *allocator_; }

  // ---- memory: copy, fill, reorder, convert (cuda_backend_memory.cu)
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  Tensor to_layout(const Tensor& t, Layout layout) override;
  void convert(const Tensor& src, Tensor& dst) override;

 private:
  int index_;
  std::string name_;
  std::unique_ptr<Allocator> allocator_;
};

}  // namespace packrat::cuda
