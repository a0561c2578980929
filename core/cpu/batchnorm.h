#pragma once
// Batch normalization over a 4-d tensor as it lies (plain or blocked; the output keeps the
// input's layout and dtype). x is f32, bf16 or f16 (autocast's input, read as it is saved);
// gradients are f32. Scale (weight) and shift (bias) are optional, each (C).
//
// Two kernels: OpenMP loops (batchnorm_loops.cpp, the default) and oneDNN's. oneDNN's jit
// batchnorm synchronises its threads with spin barriers inside each call, which stalls when
// the cores are shared with other runnable threads: in a ResNet-18 step on the shared 2-core
// machine its 64x64x32x32 forward took ~200 ms per call; BM_BatchNormForwardBackward measured
// 166 vs 47 ms (oneDNN vs loops) under load, but 26 vs 40 ms once when the machine was quieter.
// The loops run one parallel pass for the sums and one elementwise pass, without barriers.
// Both are tested against each other and against PyTorch.
#include "core/tensor.h"

namespace packrat::cpu {

enum class BatchNormKernel { Loops, Dnnl };
void set_batchnorm_kernel(BatchNormKernel k);
BatchNormKernel batchnorm_kernel();

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

// The loop kernels (same contracts).
void batchnorm_forward_training_loops(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                      Tensor& mean, Tensor& var);
Tensor batchnorm_forward_inference_loops(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& mean, const Tensor& var, float eps);
void batchnorm_backward_loops(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias,
                              const Tensor& mean, const Tensor& var, float eps, bool global_stats, Tensor& dx,
                              Tensor& dweight, Tensor& dbias);

}  // namespace packrat::cpu
