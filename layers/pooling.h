#pragma once
// nn.MaxPool2d, nn.AvgPool2d (padding counted, as PyTorch's default) and nn.AdaptiveAvgPool2d.
// Square windows; stride defaults to the kernel size as in PyTorch.
#include <cstdint>

#include "autograd/ops.h"
#include "layers/module.h"

namespace packrat {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);  // stride 0: = kernel
  Tensor forward(const Tensor& x) override;

 private:
  ops::Pool2dOptions o_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;

 private:
  ops::Pool2dOptions o_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t out_h_, out_w_;
};

}  // namespace packrat
