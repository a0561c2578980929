// The gradient check itself: it must fail when it has nothing to check.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using namespace packrat::testing;

// The output requires grad through a captured weight, so backward runs; but no input requires grad,
// so there is nothing to probe: that must not pass silently.
TEST(Gradcheck, FailsWhenNoInputRequiresGrad) {
  static Tensor w;
  w = random_tensor({4}, 2);
  w.set_requires_grad(true);
  const Tensor x = random_tensor({4}, 1);  // requires_grad is off
  EXPECT_NONFATAL_FAILURE(gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], w); }, {x}),
                          "gradcheck probed no element");
  w = Tensor();
}

TEST(Gradcheck, PassesOnACorrectGradient) {
  Tensor x = random_tensor({4}, 1);
  x.set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::relu(in[0]); }, {x});
}
