#include "layers/pooling.h"

namespace packrat {

namespace {
ops::Pool2dOptions pool_options(const char* what, int64_t kernel, int64_t stride, int64_t padding) {
  if (stride == 0) stride = kernel;
  PACKRAT_CHECK(kernel > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel,
                "{}: invalid kernel {} stride {} padding {} (padding must be at most half the kernel)", what, kernel,
                stride, padding);
  ops::Pool2dOptions o{};
  o.kernel_h = o.kernel_w = kernel;
  o.stride_h = o.stride_w = stride;
  o.pad_h = o.pad_w = padding;
  return o;
}
void check_4d(const char* what, const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4, "{} {}: expects a 4-d input (N, C, H, W), got {}", what,
                LayerScope::current(), x.defined() ? x.describe() : std::string("an undefined tensor"));
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : o_(pool_options("MaxPool2d", kernel, stride, padding)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_4d("maxpool2d", x);
  return ops::maxpool2d(x, o_);
}

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : o_(pool_options("AvgPool2d", kernel, stride, padding)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_4d("avgpool2d", x);
  return ops::avgpool2d(x, o_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {
  PACKRAT_CHECK(out_h > 0 && out_w > 0, "AdaptiveAvgPool2d: output size must be positive, got {}x{}", out_h, out_w);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_4d("adaptive_avgpool2d", x);
  return ops::adaptive_avgpool2d(x, out_h_, out_w_);
}

}  // namespace packrat
