// The backend test, convolution section: conv_input, conv_forward and both backwards on every
// backend against a direct 7-loop convolution in double, for strided, padded, dilated, grouped,
// depthwise and pointwise geometries, plain, blocked and NHWC inputs.
#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

// Values are O(1..10); Winograd (Auto, on AVX-512) rounds differently from direct loops by ~1e-4.
constexpr float kRtol = 1e-4f, kAtol = 1e-3f;

struct ConvCase {
  int64_t N, Cin, H, W, Cout, KH, KW, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  bool bias;
};

ConvGeometry geometry(const ConvCase& c) {
  ConvGeometry g{c.N,        c.Cin,      c.H,     c.W,     c.Cout,  c.KH,    c.KW,     0,     0,
                 c.stride_h, c.stride_w, c.pad_h, c.pad_w, c.dil_h, c.dil_w, c.groups, c.bias};
  g.OH = (c.H + 2 * c.pad_h - (c.KH - 1) * c.dil_h - 1) / c.stride_h + 1;
  g.OW = (c.W + 2 * c.pad_w - (c.KW - 1) * c.dil_w - 1) / c.stride_w + 1;
  return g;
}

// y = conv(x, w) + b, dx = conv^T(gy, w), dw = sum gy * x, db = sum gy: one loop nest in double
// over every (n, oc, i, j, c, kh, kw) that reads an input element.
struct ConvReference {
  std::vector<float> y, dx, dw, db;
};
ConvReference reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                        const std::vector<float>& b, const std::vector<float>& gy) {
  const int64_t cg = g.Cin / g.groups, og = g.Cout / g.groups;
  std::vector<double> y(static_cast<size_t>(g.N * g.Cout * g.OH * g.OW)), dx(x.size()), dw(w.size()),
      db(static_cast<size_t>(g.Cout));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oc = 0; oc < g.Cout; ++oc)
      for (int64_t i = 0; i < g.OH; ++i)
        for (int64_t j = 0; j < g.OW; ++j) {
          const size_t yi = static_cast<size_t>(((n * g.Cout + oc) * g.OH + i) * g.OW + j);
          if (g.has_bias) y[yi] += b[static_cast<size_t>(oc)];
          db[static_cast<size_t>(oc)] += gy[yi];
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t kh = 0; kh < g.KH; ++kh)
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                const int64_t ih = i * g.stride_h - g.pad_h + kh * g.dilation_h;
                const int64_t iw = j * g.stride_w - g.pad_w + kw * g.dilation_w;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                const size_t xi = static_cast<size_t>(((n * g.Cin + (oc / og) * cg + c) * g.H + ih) * g.W + iw);
                const size_t wi = static_cast<size_t>(((oc * cg + c) * g.KH + kh) * g.KW + kw);
                y[yi] += double(x[xi]) * w[wi];
                dx[xi] += double(gy[yi]) * w[wi];
                dw[wi] += double(gy[yi]) * x[xi];
              }
        }
  auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return {f(y), f(dx), f(dw), f(db)};
}

TEST(BackendConv, ForwardAndBothBackwardsMatchDirectLoopsOnEveryBackend) {
  const std::vector<ConvCase> cases = {
      {2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},      // 3x3, padded, bias
      {2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, false},     // strided
      {1, 2, 7, 8, 3, 3, 2, 2, 1, 0, 2, 1, 1, 1, true},      // asymmetric kernel, stride and padding
      {1, 2, 7, 7, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, true},      // dilated
      {2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, false},     // 2 groups
      {2, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, false},  // depthwise, blockable
      {3, 32, 2, 2, 32, 5, 5, 1, 1, 2, 2, 1, 1, 32, false},  // depthwise 5x5 on 2x2 (EfficientNet's last stages)
      {2, 32, 3, 2, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32, true},   // depthwise 3x3 on 3x2, bias
      {2, 16, 9, 8, 16, 5, 5, 2, 2, 2, 2, 1, 1, 16, false},  // depthwise 5x5, stride 2
      {1, 16, 7, 7, 16, 3, 3, 1, 1, 2, 2, 2, 2, 16, true},   // depthwise 3x3, dilated
      {2, 16, 6, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},    // 16 -> 32, blockable both sides
      {2, 32, 6, 6, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1, false},   // pointwise, stride 2
      {1, 40, 4, 4, 80, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},    // 40 -> 80: plain in, blockable out
      {32, 28, 1, 1, 672, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},  // squeeze-and-excitation's expansion: 1x1 planes, bias
  };
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (size_t k = 0; k < cases.size(); ++k) {
      const ConvGeometry g = geometry(cases[k]);
      SCOPED_TRACE("case " + std::to_string(k) + ": " + g.key());
      const Tensor hx = host_random({g.N, g.Cin, g.H, g.W}, 100 + k);
      const Tensor hw = host_random({g.Cout, g.Cin / g.groups, g.KH, g.KW}, 200 + k, -0.5f, 0.5f);
      const Tensor hb = host_random({g.Cout}, 300 + k);
      const Tensor hgy = host_random({g.N, g.Cout, g.OH, g.OW}, 400 + k);
      const ConvReference want = reference(g, hx.to_vector(), hw.to_vector(), hb.to_vector(), hgy.to_vector());
      const Tensor w = hw.to(b->device()), bias = g.has_bias ? hb.to(b->device()) : Tensor();
      std::vector<Layout> layouts = {Layout::Plain};
      for (Layout blocked : {Layout::nChw16c, Layout::nChw8c})
        if (g.Cin % channel_block(blocked) == 0 || g.Cout % channel_block(blocked) == 0) layouts.push_back(blocked);
      layouts.push_back(Layout::NHWC);  // what the CUDA backend's convolutions make, and the CPU's on AMX
      for (Layout l : layouts) {
        SCOPED_TRACE(layout_name(l));
        // Inputs in layout l where their channels allow it.
        auto in_layout = [&](const Tensor& h) {
          const bool fits = l == Layout::NHWC || (channel_block(l) && h.dim(1) % channel_block(l) == 0);
          return fits ? b->to_layout(h.to(b->device()), l) : h.to(b->device());
        };
        const Tensor x = in_layout(hx), gy = in_layout(hgy);
        const Tensor xs = b->conv_input(x, g);
        EXPECT_EQ(host_values(xs), hx.to_vector()) << "conv_input keeps the values";
        EXPECT_EQ(b->conv_input(xs, g).raw(), xs.raw()) << "conv_input of its own result is that result";
        for (bool keep : {false, true}) {
          const Tensor y = b->conv_forward(x, w, bias, g, keep);
          EXPECT_EQ(y.shape(), Shape({g.N, g.Cout, g.OH, g.OW}));
          expect_close(host_values(y), want.y, kRtol, kAtol, "y");
        }
        expect_close(host_values(b->conv_forward(xs, w, bias, g, false)), want.y, kRtol, kAtol, "y from conv_input");
        const Tensor dx = b->conv_backward_data(gy, w, g);
        EXPECT_EQ(dx.shape(), hx.shape());
        expect_close(host_values(dx), want.dx, kRtol, kAtol, "dx");
        // The weight as this backend keeps a Conv2d's (KRSC on a GPU) gives the same results.
        const Tensor w_kept = b->to_layout(w, b->conv_weight_layout());
        expect_close(host_values(b->conv_forward(x, w_kept, bias, g, false)), want.y, kRtol, kAtol, "y, kept weight");
        // dx added in place into a gradient the input holds already (cuDNN's beta = 1 on a GPU).
        const Tensor base = host_random({g.N, g.Cin, g.H, g.W}, 500 + k);
        Tensor into = b->to_layout(base.to(b->device()), dx.layout()).clone();  // not base itself on the CPU
        const Tensor summed = b->conv_backward_data_into(gy, w_kept, g, into);
        EXPECT_TRUE(summed.same_storage(into)) << "conv_backward_data_into returns its target";
        std::vector<float> want_sum = base.to_vector();
        for (size_t i = 0; i < want_sum.size(); ++i) want_sum[i] += want.dx[i];
        expect_close(host_values(into), want_sum, kRtol, kAtol, "into + dx");
        Tensor gw, gb;
        b->conv_backward_weights(xs, gy, g, gw, gb);
        EXPECT_EQ(gw.layout(), b->conv_weight_layout()) << "the weight gradient in the kept weight's layout";
        EXPECT_EQ(gw.shape(), hw.shape());
        expect_close(host_values(gw), want.dw, kRtol, 2 * kAtol, "dw");
        EXPECT_EQ(gb.defined(), g.has_bias);
        if (g.has_bias) expect_close(host_values(gb), want.db, kRtol, 2 * kAtol, "db");
      }
    }
  }
}

// The bf16 convolutions' geometries.
const std::vector<ConvCase> kBf16Cases = {
    {4, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},  // ResNet's 3x3
    {4, 16, 8, 8, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},   // 16 -> 48, bias
    {4, 32, 8, 8, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, false},  // strided: an f32 weight gradient on a bf16 CPU
    {4, 32, 8, 8, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, false},  // pointwise
    {2, 32, 6, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32, true},  // depthwise, bias
    {2, 3, 28, 28, 16, 4, 4, 4, 4, 0, 0, 1, 1, 1, true},  // a ViT's patch embedding: 3 channels in
};

// fn(b, g, k) for every backend whose convolutions compute in bf16 and every geometry k of
// kBf16Cases, g its ConvGeometry in bf16.
template <typename Fn>
void for_each_bf16_convolution(Fn fn) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    if (!b->conv_computes_in(DType::bf16)) continue;
    DeviceScope on(b->device());
    for (size_t k = 0; k < kBf16Cases.size(); ++k) {
      ConvGeometry g = geometry(kBf16Cases[k]);
      g.dtype = DType::bf16;
      SCOPED_TRACE("case " + std::to_string(k) + ": " + g.key());
      fn(b, g, k);
    }
  }
}

// conv_grad_output hands both backward kernels the output gradient as they read it (on a CPU
// with AMX, one channels-last bf16 copy): the gradients are those of the f32 gradient rounded to
// the kernels' dtype and passed as it is, bit for bit.
TEST(BackendConv, TheGradOutputFormGivesTheRoundedGradientsGradients) {
  const ConvAlgorithm before = conv_algorithm_setting();
  set_conv_algorithm(ConvAlgorithm::Deterministic);  // bit for bit: no split sums in a varying order (cuDNN)
  for_each_bf16_convolution([](Backend* b, const ConvGeometry& g, size_t k) {
    const Tensor x = b->conv_input(host_random({g.N, g.Cin, g.H, g.W}, 600 + k).to(b->device()).to(DType::bf16), g);
    const Tensor w = host_random({g.Cout, g.Cin / g.groups, g.KH, g.KW}, 700 + k, -0.5f, 0.5f).to(b->device());
    const Tensor bias = g.has_bias ? host_random({g.Cout}, 750 + k).to(b->device()) : Tensor();
    const Tensor y = b->conv_forward(x, w, bias, g, false);
    const Tensor gy = b->to_layout(host_random({g.N, g.Cout, g.OH, g.OW}, 800 + k).to(b->device()), y.layout());
    const Tensor form = b->conv_grad_output(gy, g), rounded = gy.to(DType::bf16);
    EXPECT_EQ(form.dtype(), DType::bf16);
    EXPECT_EQ(form.shape(), gy.shape());
    EXPECT_EQ(host_values(b->conv_backward_data(form, w, g)), host_values(b->conv_backward_data(rounded, w, g)));
    Tensor gw, gb, gw0, gb0;
    b->conv_backward_weights(x, form, g, gw, gb);
    b->conv_backward_weights(x, rounded, g, gw0, gb0);
    EXPECT_EQ(host_values(gw), host_values(gw0));
    if (g.has_bias) EXPECT_EQ(host_values(gb), host_values(gb0));
  });
  set_conv_algorithm(before);
}

// A backend whose convolutions compute in bf16 (oneDNN's on a CPU with AVX512_BF16, cuDNN's on a
// GPU) against the direct loops on the bf16-rounded operands: y in bf16, dx, dw and db in f32,
// within bf16's rounding of y (and, on a GPU, of dx and dw, which cuDNN writes in bf16).
TEST(BackendConv, Bf16ConvolutionsMatchDirectLoopsOnTheRoundedOperands) {
  auto rounded = [](const Tensor& h) { return h.to(DType::bf16).to(DType::f32); };
  for_each_bf16_convolution([&](Backend* b, const ConvGeometry& g, size_t k) {
    const Tensor hx = rounded(host_random({g.N, g.Cin, g.H, g.W}, 900 + k));
    const Tensor hw = host_random({g.Cout, g.Cin / g.groups, g.KH, g.KW}, 910 + k, -0.5f, 0.5f);
    const Tensor hb = host_random({g.Cout}, 920 + k);
    const Tensor hgy = host_random({g.N, g.Cout, g.OH, g.OW}, 930 + k);
    const ConvReference want =
        reference(g, hx.to_vector(), rounded(hw).to_vector(), hb.to_vector(), rounded(hgy).to_vector());
    const Tensor x = b->conv_input(hx.to(b->device()).to(DType::bf16), g);
    const Tensor w = b->to_layout(hw.to(b->device()), b->conv_weight_layout());  // f32, read as bf16
    const Tensor bias = g.has_bias ? hb.to(b->device()) : Tensor();
    const Tensor y = b->conv_forward(x, w, bias, g, false);
    EXPECT_EQ(y.dtype(), DType::bf16);
    expect_close(host_values(y.to(DType::f32)), want.y, 1e-2f, 5e-2f, "y");
    const Tensor gy = b->conv_grad_output(b->to_layout(hgy.to(b->device()), y.layout()), g);
    const Tensor dx = b->conv_backward_data(gy, w, g);
    EXPECT_EQ(dx.dtype(), DType::f32);
    expect_close(host_values(dx), want.dx, 1e-2f, 5e-2f, "dx");
    Tensor gw, gb;
    b->conv_backward_weights(x, gy, g, gw, gb);
    EXPECT_EQ(gw.dtype(), DType::f32);
    EXPECT_EQ(gw.layout(), b->conv_weight_layout());
    expect_close(host_values(gw), want.dw, 1e-2f, 1e-1f, "dw");
    if (g.has_bias) expect_close(host_values(gb), want.db, 1e-4f, 1e-3f, "db");
  });
}

}  // namespace
}  // namespace packrat
