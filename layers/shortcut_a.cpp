#include "layers/shortcut_a.h"

#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat {

Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4 && is_f32_or_half(x.dtype()),
                "shortcut_a {}: expects a 4-d f32, bf16 or f16 input (N, C, H, W), got {}", LayerScope::current(),
                x.defined() ? x.describe() : std::string("an undefined tensor"));
  PACKRAT_CHECK(stride > 0 && out_channels >= x.dim(1), "shortcut_a {}: cannot go from {} to {} channels with stride {}",
                LayerScope::current(), x.dim(1), out_channels, stride);
  // A 16-bit x (autocast): moved in f32 (exact), y in x's dtype.
  Tensor y = in_dtype(backend_of(x).pad_channels_subsample(as_f32(x), out_channels, stride),
                      x.dtype());  // (N, Cout, ceil(H/s), ceil(W/s))
  if (needs_grad({&x})) {
    const Shape in_shape = x.shape();
    const Layout in_layout = x.layout();
    record("shortcut_a", {&x}, {&y}, {}, [in_shape, in_layout, stride](Node&, const std::vector<Tensor>& grads) {
      std::vector<Tensor> out(1);
      if (!grads[0].defined()) return out;
      out[0] = backend_of(grads[0]).pad_channels_subsample_backward(grads[0], in_shape, in_layout, stride);
      return out;
    });
  }
  return y;
}

ShortcutA::ShortcutA(int64_t in_channels, int64_t out_channels, int64_t stride)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  PACKRAT_CHECK(in_ > 0 && out_ >= in_ && stride > 0, "ShortcutA: cannot go from {} to {} channels with stride {}",
                in_, out_, stride);
}

Tensor ShortcutA::forward(const Tensor& x) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4 && x.dim(1) == in_, "shortcut_a {}: input {} should have {} channels",
                LayerScope::current(), x.defined() ? x.describe() : std::string("an undefined tensor"), in_);
  return pad_channels_subsample(x, out_, stride_);
}

}  // namespace packrat
