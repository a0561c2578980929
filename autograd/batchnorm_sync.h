#pragma once
// Synchronised batchnorm for data-parallel training: while a BatchnormSync is installed,
// ops::batchnorm2d in training mode normalises with the mean and variance of the whole global
// batch (every process's shard), and its backward adds the terms that flow through those shared
// statistics, so that R processes with batch N/R compute what one process computes with batch N.
// The running statistics are updated with the global statistics, identically on every process.
//
// The process's gradients are later combined by the data-parallel reducer as
// sum_r share_r * grad_r (share_r: the process's fraction of the global batch, found here by
// summing the processes' sample counts), so the backward returns the gradient of the global loss
// divided by share.
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "core/tensor.h"

namespace packrat {

struct BatchnormSync {
  // data[i] = sum over processes of data[i], in place, every process (a blocking collective).
  // Double: the statistics are combined in double and rounded to f32 once, so that one process
  // gets exactly batchnorm2d's statistics and R processes lose no more than one rounding.
  std::function<void(double* data, int64_t count, std::string_view what)> sum;
};

// Process-wide; nullptr turns it off. Installed by the trainer for distributed.sync_batchnorm.
void set_batchnorm_sync(std::shared_ptr<const BatchnormSync> sync);
std::shared_ptr<const BatchnormSync> batchnorm_sync();

namespace ops {
// batchnorm2d in training mode with global statistics through `sync` (called by
// ops::batchnorm2d while a sync is installed). x (N, C, H, W) any layout; weight and bias (C)
// both required.
Tensor sync_batchnorm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, float momentum, float eps, const BatchnormSync& sync,
                        Tensor* num_batches_tracked = nullptr);
// A training step's update of both running statistics from the batch's, n values a channel (the
// variance's estimate unbiased by n / (n - 1)), and the batch counted when num_batches_tracked is
// given: one backend call (one kernel on a GPU), the versions bumped. Both batchnorm ops use it.
// Nothing while recomputing() (autograd/checkpoint.h): a step counts its batch once.
void update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked, const Tensor& mean,
                    const Tensor& var, float momentum, double n);
// What both batchnorm ops keep for backward, in this order: x (Need::Value, compressible), the
// mean and variance (exact), and the weight where it is defined.
std::vector<SavedHandle> save_batchnorm_inputs(const Tensor& x, const Tensor& mean, const Tensor& var,
                                               const Tensor& weight);
}  // namespace ops

}  // namespace packrat
