#include <gtest/gtest.h>

#include "autograd/tape.h"
#include "layers/shortcut_a.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using namespace packrat::testing;

TEST(LayerShortcutA, SubsamplesAndZeroPadsChannels) {
  NoGradScope ng;
  Tensor x = random_tensor({2, 2, 5, 5}, 1);
  Tensor y = pad_channels_subsample(x, 4, 2);  // 1 zero channel in front, 1 behind
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3, 3}));
  auto xv = x.to_vector(), yv = y.to_vector();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t w = 0; w < 3; ++w) {
          const float got = yv[((n * 4 + c) * 3 + h) * 3 + w];
          const float want = (c == 0 || c == 3) ? 0.0f : xv[((n * 2 + (c - 1)) * 5 + 2 * h) * 5 + 2 * w];
          EXPECT_EQ(got, want) << n << " " << c << " " << h << " " << w;
        }
}

TEST(LayerShortcutA, GradientByCentralDifferences) {
  Tensor x = random_tensor({2, 2, 4, 4}, 2);
  x.set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return pad_channels_subsample(in[0], 6, 2); }, {x});
}

TEST(LayerShortcutA, BlockedInputGivesTheSameValuesAndGradients) {
  for (Layout layout : {Layout::nChw16c, Layout::nChw8c}) {
    SCOPED_TRACE(layout_name(layout));
    Tensor plain = random_tensor({1, 16, 4, 4}, 3);
    Tensor blocked = plain.to_layout(layout);
    plain.set_requires_grad(true);
    blocked.set_requires_grad(true);
    Tensor seed = random_tensor({1, 32, 2, 2}, 4);
    Tensor yp = pad_channels_subsample(plain, 32, 2);
    backward(yp, seed);  // backward consumes the tape: one graph at a time
    Tensor yb = pad_channels_subsample(blocked, 32, 2);
    EXPECT_EQ(yb.layout(), layout);
    EXPECT_EQ(yp.to_vector(), yb.to_vector());
    backward(yb, seed.to_layout(layout));
    EXPECT_EQ(blocked.grad().layout(), layout);
    EXPECT_EQ(plain.grad().to_vector(), blocked.grad().to_vector());
  }
}

TEST(LayerShortcutA, RejectsFewerOutputChannels) {
  ShortcutA s(16, 32, 2);
  EXPECT_THROW(s(random_tensor({1, 8, 4, 4}, 1)), Error);
  EXPECT_THROW(ShortcutA(32, 16, 1), Error);
}
