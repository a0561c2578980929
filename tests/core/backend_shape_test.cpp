// The backend test, shape section: the batched last-two-dims transpose (any element size) and
// the option-A shortcut's pad + subsample and its backward, in every layout, on every backend
// against index arithmetic written here.
#include <string>
#include <vector>

#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::host_values;

TEST(BackendShape, TransposeLast2SwapsTheLastTwoDims) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (const Shape& shape : {Shape{3, 40, 37}, Shape{5, 2}, Shape{2, 32, 3, 5}}) {
      const Tensor hx = host_random(shape, 1);
      const std::vector<float> xv = hx.to_vector();
      const int64_t M = shape[shape.rank() - 2], N = shape[shape.rank() - 1], B = hx.numel() / (M * N);
      std::vector<float> want(xv.size());
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) want[(bb * N + n) * M + m] = xv[(bb * M + m) * N + n];
      Tensor x = hx.to(b->device());
      if (shape.rank() == 4) x = b->to_layout(x, Layout::nChw16c);  // read as plain
      const Tensor y = b->transpose_last2(x);
      EXPECT_EQ(y.dim(-1), M);
      EXPECT_EQ(y.dim(-2), N);
      EXPECT_EQ(host_values(y), want) << shape.str();
      // f64 (8-byte elements) moves the same way.
      EXPECT_EQ(host_values(b->transpose_last2(hx.to(DType::f64).to(b->device()))), want) << shape.str();
    }
  }
}

TEST(BackendShape, PadChannelsSubsampleAndItsBackwardMoveTheRightElements) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t N = 2, Cin = 16, H = 5, W = 6, Cout = 32, s = 2, Ho = 3, Wo = 3, front = 8;
    const Tensor hx = host_random({N, Cin, H, W}, 2), hg = host_random({N, Cout, Ho, Wo}, 3);
    const std::vector<float> xv = hx.to_vector(), gv = hg.to_vector();
    std::vector<float> want(static_cast<size_t>(N * Cout * Ho * Wo), 0.0f), want_gx(xv.size(), 0.0f);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cin; ++c)
        for (int64_t h = 0; h < Ho; ++h)
          for (int64_t w = 0; w < Wo; ++w) {
            const int64_t in = ((n * Cin + c) * H + h * s) * W + w * s;
            const int64_t out = ((n * Cout + c + front) * Ho + h) * Wo + w;
            want[out] = xv[in];
            want_gx[in] = gv[out];
          }
    for (Layout layout : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
      const Tensor x = b->to_layout(hx.to(b->device()), layout);
      const Tensor y = b->pad_channels_subsample(x, Cout, s);
      EXPECT_EQ(y.shape(), Shape({N, Cout, Ho, Wo}));
      if (layout == Layout::NHWC) EXPECT_EQ(y.layout(), Layout::NHWC) << "the shortcut keeps channels-last activations";
      EXPECT_EQ(host_values(y), want) << layout_name(layout);
      const Tensor gx = b->pad_channels_subsample_backward(b->to_layout(hg.to(b->device()), y.layout()), x.shape(),
                                                           layout, s);
      EXPECT_EQ(gx.layout(), layout);
      EXPECT_EQ(host_values(gx), want_gx) << layout_name(layout);
    }
  }
}

}  // namespace
}  // namespace packrat
