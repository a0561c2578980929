// packrat's own depthwise weight gradient (core/cpu/depthwise_conv.h) against a direct loop in
// double, on every CPU: nChw16c and NHWC operands, f32 and bf16 (read as they lie), the 3x3 and
// 5x5 kernels it unrolls and a 7x7 it walks generically, strided, dilated and padded, with and
// without a bias; and the layouts it refuses.
#include "core/cpu/depthwise_conv.h"

#include <gtest/gtest.h>

#include "core/allocator.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

struct DepthwiseCase {
  int64_t n, c, h, w, k, stride, pad, dilation;
  bool bias;
};

ConvGeometry geometry(const DepthwiseCase& d) {
  const int64_t oh = (d.h + 2 * d.pad - (d.k - 1) * d.dilation - 1) / d.stride + 1;
  const int64_t ow = (d.w + 2 * d.pad - (d.k - 1) * d.dilation - 1) / d.stride + 1;
  return ConvGeometry{d.n,        d.c,   d.h,   d.w,        d.c,        d.k, d.k, oh, ow, d.stride, d.stride,
                      d.pad,      d.pad, d.dilation, d.dilation, d.c, d.bias};
}

// dw[c][kh][kw] = sum over (n, oh, ow) of gy * x at the tap's input pixel; db[c] = sum of gy.
void reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& gy, std::vector<float>& dw,
               std::vector<float>& db) {
  std::vector<double> w(static_cast<size_t>(g.Cin * g.KH * g.KW)), b(static_cast<size_t>(g.Cin));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.Cin; ++c)
      for (int64_t i = 0; i < g.OH; ++i)
        for (int64_t j = 0; j < g.OW; ++j) {
          const double gv = gy[static_cast<size_t>(((n * g.Cin + c) * g.OH + i) * g.OW + j)];
          b[static_cast<size_t>(c)] += gv;
          for (int64_t kh = 0; kh < g.KH; ++kh)
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const int64_t ih = i * g.stride_h - g.pad_h + kh * g.dilation_h, iw = j * g.stride_w - g.pad_w + kw * g.dilation_w;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
              w[static_cast<size_t>((c * g.KH + kh) * g.KW + kw)] +=
                  gv * x[static_cast<size_t>(((n * g.Cin + c) * g.H + ih) * g.W + iw)];
            }
        }
  dw.assign(w.begin(), w.end());
  db.assign(b.begin(), b.end());
}

TEST(DepthwiseWeightGradient, MatchesADirectLoopOnBlockedAndChannelsLastF32AndBf16Operands) {
  const std::vector<DepthwiseCase> cases = {
      {3, 32, 9, 7, 3, 1, 1, 1, false},   // 3x3, two slices, odd sizes
      {2, 48, 11, 10, 5, 2, 2, 1, true},  // 5x5 stride 2, bias
      {2, 16, 2, 2, 5, 1, 2, 1, false},   // 5x5 on 2x2: every tap at an edge (EfficientNet's last stage)
      {1, 16, 9, 9, 3, 1, 2, 2, true},    // dilated
      {2, 16, 8, 8, 7, 1, 3, 1, false},   // 7x7: the generic walk
      {1, 16, 6, 5, 3, 2, 0, 1, false},   // no padding, stride 2
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const ConvGeometry g = geometry(cases[k]);
    SCOPED_TRACE(g.key());
    Tensor hx = testing::random_tensor({g.N, g.Cin, g.H, g.W}, 10 + k);
    Tensor hgy = testing::random_tensor({g.N, g.Cout, g.OH, g.OW}, 20 + k);
    for (DType dtype : {DType::f32, DType::bf16}) {
      // The direct loop on the values the operands hold (rounded to bf16 where they are bf16).
      const Tensor rx = hx.to(dtype).to(DType::f32), rgy = hgy.to(dtype).to(DType::f32);
      std::vector<float> want_w, want_b;
      reference(g, rx.to_vector(), rgy.to_vector(), want_w, want_b);
      for (Layout layout : {Layout::nChw16c, Layout::NHWC}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(layout_name(layout)));
        const Tensor x = hx.to_layout(layout).to(dtype), gy = hgy.to_layout(layout).to(dtype);
        const int64_t workspace = Allocator::cpu().current(MemTag::Workspace);
        Tensor gw, gb;
        cpu::depthwise_backward_weights(x, gy, g, gw, gb);
        EXPECT_EQ(Allocator::cpu().current(MemTag::Workspace), workspace) << "its sums are freed";
        EXPECT_EQ(gw.shape(), Shape({g.Cout, 1, g.KH, g.KW}));
        EXPECT_EQ(gw.dtype(), DType::f32);
        testing::expect_close(gw.to_vector(), want_w, 1e-5f, 1e-4f, "dw");
        EXPECT_EQ(gb.defined(), g.has_bias);
        if (g.has_bias) testing::expect_close(gb.to_vector(), want_b, 1e-5f, 1e-4f, "db");
      }
    }
  }
}

TEST(DepthwiseWeightGradient, RefusesALayoutItDoesNotWalk) {
  const ConvGeometry g = geometry({1, 16, 4, 4, 3, 1, 1, 1, false});
  const Tensor x = testing::random_tensor({1, 16, 4, 4}, 1), gy = testing::random_tensor({1, 16, 4, 4}, 2);
  Tensor gw, gb;
  const std::string message = testing::message_of([&] { cpu::depthwise_backward_weights(x, gy, g, gw, gb); });
  EXPECT_NE(message.find("depthwise_backward_weights: x"), std::string::npos) << message;
  EXPECT_NE(message.find("neither nChw16c nor NHWC"), std::string::npos) << message;
}

}  // namespace
}  // namespace packrat
