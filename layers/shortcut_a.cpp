#include "layers/shortcut_a.h"

#include <cstring>

#include "autograd/tape.h"
#include "core/cpu/layout.h"
#include "core/parallel.h"

namespace packrat {

namespace {

struct Geometry {
  int64_t N, Cin, H, W, Cout, Ho, Wo, stride, front;
};

// dst[n, c + front, ho, wo] = src[n, c, ho*s, wo*s] (forward) for c in [0, Cin).
void gather(const Geometry& g, const Tensor& src, Tensor& dst) {
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const Layout ls = src.layout(), ld = dst.layout();
  parallel_for(0, g.N * g.Cin, [&](int64_t nc) {
    const int64_t n = nc / g.Cin, c = nc % g.Cin;
    for (int64_t ho = 0; ho < g.Ho; ++ho)
      for (int64_t wo = 0; wo < g.Wo; ++wo)
        d[cpu::nchw_offset(ld, g.Cout, g.Ho, g.Wo, n, c + g.front, ho, wo)] =
            s[cpu::nchw_offset(ls, g.Cin, g.H, g.W, n, c, ho * g.stride, wo * g.stride)];
  });
}

// dst[n, c, ho*s, wo*s] = src[n, c + front, ho, wo] (backward); dst is zero elsewhere.
void scatter(const Geometry& g, const Tensor& src, Tensor& dst) {
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const Layout ls = src.layout(), ld = dst.layout();
  parallel_for(0, g.N * g.Cin, [&](int64_t nc) {
    const int64_t n = nc / g.Cin, c = nc % g.Cin;
    for (int64_t ho = 0; ho < g.Ho; ++ho)
      for (int64_t wo = 0; wo < g.Wo; ++wo)
        d[cpu::nchw_offset(ld, g.Cin, g.H, g.W, n, c, ho * g.stride, wo * g.stride)] =
            s[cpu::nchw_offset(ls, g.Cout, g.Ho, g.Wo, n, c + g.front, ho, wo)];
  });
}

}  // namespace

Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) {
  PACKRAT_CHECK(x.defined() && x.rank() == 4 && x.dtype() == DType::f32,
                "shortcut_a {}: expects a 4-d f32 input (N, C, H, W), got {}", LayerScope::current(),
                x.defined() ? x.describe() : std::string("an undefined tensor"));
  PACKRAT_CHECK(stride > 0 && out_channels >= x.dim(1), "shortcut_a {}: cannot go from {} to {} channels with stride {}",
                LayerScope::current(), x.dim(1), out_channels, stride);
  Geometry g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), out_channels, (x.dim(2) + stride - 1) / stride,
             (x.dim(3) + stride - 1) / stride, stride, (out_channels - x.dim(1)) / 2};
  const Layout out_layout =
      x.layout() == Layout::nChw16c && out_channels % cpu::kChannelBlock == 0 ? Layout::nChw16c : Layout::Plain;
  Tensor y = Tensor::zeros({g.N, g.Cout, g.Ho, g.Wo}, DType::f32, out_layout);  // (N, Cout, Ho, Wo)
  gather(g, x, y);
  if (needs_grad({&x})) {
    const Layout in_layout = x.layout();
    record("shortcut_a", {&x}, {&y}, {}, [g, in_layout](Node&, const std::vector<Tensor>& grads) {
      std::vector<Tensor> out(1);
      if (!grads[0].defined()) return out;
      out[0] = Tensor::zeros({g.N, g.Cin, g.H, g.W}, DType::f32, in_layout);  // (N, Cin, H, W)
      scatter(g, grads[0], out[0]);
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
