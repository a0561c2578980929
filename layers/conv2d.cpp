#include "layers/conv2d.h"

#include "autograd/ops.h"
#include "core/backend.h"
#include "layers/init.h"

namespace packrat {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, const ConvConfig& c, uint64_t seed)
    : in_(in_channels), out_(out_channels), kernel_(kernel), c_(c) {
  PACKRAT_CHECK(in_ > 0 && out_ > 0 && kernel_ > 0 && c.stride > 0 && c.padding >= 0 && c.dilation > 0 && c.groups > 0,
                "Conv2d: invalid configuration in={} out={} kernel={} stride={} padding={} dilation={} groups={}", in_,
                out_, kernel_, c.stride, c.padding, c.dilation, c.groups);
  PACKRAT_CHECK(in_ % c.groups == 0 && out_ % c.groups == 0,
                "Conv2d: in_channels {} and out_channels {} must be divisible by groups {}", in_, out_, c.groups);
  TagScope tag(MemTag::Parameter);
  PhiloxStream rng(seed, 0);
  Tensor w = Tensor::empty({out_, in_ / c.groups, kernel_, kernel_});  // (out, in/groups, k, k)
  init::default_weight(w, rng);
  // Kept in the layout the device's convolutions read (KRSC on a GPU), so no step reorders it;
  // the values are the same on every device (init draws them in plain order).
  weight_ = register_parameter("weight", w.to_layout(backend_of(w).conv_weight_layout()));
  if (c.bias) {
    Tensor b = Tensor::empty({out_});  // (out)
    PhiloxStream brng(seed, 1);
    init::default_bias(b, init::fan_in(w.shape()), brng);
    bias_ = register_parameter("bias", b);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4, "conv2d {}: expects a 4-d input (N, C, H, W), got {}",
                LayerScope::current(), x.defined() ? x.describe() : std::string("an undefined tensor"));
  PACKRAT_CHECK(x.dim(1) == in_, "conv2d {}: input has {} channels, weight expects {}", LayerScope::current(),
                x.dim(1), in_);
  ops::Conv2dOptions o;
  o.stride_h = o.stride_w = c_.stride;
  o.pad_h = o.pad_w = c_.padding;
  o.dilation_h = o.dilation_w = c_.dilation;
  o.groups = c_.groups;
  return ops::conv2d(x, weight_, bias_, o);
}

}  // namespace packrat
