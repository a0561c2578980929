// CpuBackend: batch normalization (core/cpu/batchnorm.h: OpenMP loops by default, or oneDNN)
// and the running-statistics updates.
#include "core/batchnorm_math.h"
#include "core/cpu/batchnorm.h"
#include "core/cpu/cpu_backend.h"

namespace packrat::cpu {

void CpuBackend::batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                            Tensor& y, Tensor& mean, Tensor& var) {
  cpu::batchnorm_forward_training(x, weight, bias, eps, y, mean, var);
}

Tensor CpuBackend::batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& mean, const Tensor& var, float eps) {
  return cpu::batchnorm_forward_inference(x, weight, bias, mean, var, eps);
}

void CpuBackend::batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias,
                                    const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                                    Tensor& dweight, Tensor& dbias) {
  cpu::batchnorm_backward(x, gy, weight, has_bias, mean, var, eps, global_stats, dx, dweight, dbias);
}

void CpuBackend::batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                          const Tensor& mean, const Tensor& var, float momentum,
                                          double var_correction) {
  check_running_update(running_mean, running_var, num_batches_tracked, mean, var);
  if (num_batches_tracked) ++num_batches_tracked->data<int64_t>()[0];
  float* rm = running_mean.data<float>();  // (C)
  float* rv = running_var.data<float>();   // (C)
  const float* m = mean.data<float>();     // (C)
  const float* v = var.data<float>();      // (C)
  for (int64_t c = 0; c < mean.numel(); ++c) {
    rm[c] = running_average(rm[c], m[c], momentum, 1.0);
    rv[c] = running_average(rv[c], v[c], momentum, var_correction);
  }
}

}  // namespace packrat::cpu
