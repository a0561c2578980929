// CudaBackend: dropout masks from Philox, masked scaling, the Philox fills of init (kernels:
// random_kernels.cu). The same words and element mapping as the CPU backend, so a mask drawn on
// the GPU is the CPU's bit for bit. The checks and messages are the CPU backend's.
#include "core/cuda/cuda_backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/random_kernels.h"
#include "core/philox_maps.h"

namespace packrat::cuda {

Tensor CudaBackend::dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream,
                                    Tensor* mask) {
  x.check_dtype(DType::f32, "dropout");
  Tensor y = Tensor::empty_like(x);
  if (mask) *mask = Tensor::empty(x.shape(), DType::u8, x.layout(), TagScope::current(), device());  // like x, 0/1
  launch_dropout(x.device_data<float>(), y.device_data<float>(), mask ? mask->device_data<uint8_t>() : nullptr,
                 x.numel(), p, scale, seed, stream);
  PACKRAT_CHECK_LAUNCH("dropout_forward");
  return y;
}

Tensor CudaBackend::mask_scale(const Tensor& grad, const Tensor& mask, float scale) {
  grad.check_dtype(DType::f32, "mask_scale");
  mask.check_dtype(DType::u8, "mask_scale");
  PACKRAT_CHECK(grad.numel() == mask.numel() && grad.layout() == mask.layout(), "{}: gradient {} and mask {}",
                op_where("mask_scale"), grad.describe(), mask.describe());
  Tensor gx = Tensor::empty_like(grad);
  launch_mask_scale(grad.device_data<float>(), mask.device_data<uint8_t>(), gx.device_data<float>(), grad.numel(),
                    scale);
  PACKRAT_CHECK_LAUNCH("mask_scale");
  return gx;
}

namespace {
void check_fill_target(const Tensor& t) {
  PACKRAT_CHECK(t.dtype() == DType::f32 && t.layout() == Layout::Plain, "init: needs a plain f32 tensor, got {}",
                t.describe());
}
}  // namespace

int64_t CudaBackend::fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) {
  check_fill_target(t);
  launch_fill_uniform(t.device_data<float>(), t.numel(), lo, hi, seed, stream, counter);
  PACKRAT_CHECK_LAUNCH("fill_uniform");
  t.bump_version();
  return fill_blocks_for(t.numel());
}

int64_t CudaBackend::fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) {
  check_fill_target(t);
  launch_fill_normal(t.device_data<float>(), t.numel(), mean, std, seed, stream, counter);
  PACKRAT_CHECK_LAUNCH("fill_normal");
  t.bump_version();
  return fill_blocks_for(t.numel());
}

}  // namespace packrat::cuda
