#pragma once
// oneDNN batch normalization over a 4-d tensor as it lies (plain or nChw16c; the output keeps
// the input's layout). Scale (weight) and shift (bias) are optional, each (C).
#include "core/tensor.h"

namespace packrat::cpu {

// Training: y and the batch statistics mean (C) and biased variance (C).
void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                Tensor& mean, Tensor& var);
// Inference with given statistics (mean, var) (C).
Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                   const Tensor& var, float eps);
// dx (x's layout), and dweight/dbias (C) when weight/bias are defined. global_stats: the
// statistics were constants (eval mode), not functions of x.
void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                        const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight, Tensor& dbias);

}  // namespace packrat::cpu
