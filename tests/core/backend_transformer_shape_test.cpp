// The backend test, the Transformer's shape primitives: permute (any rank, any element size),
// concat / narrow along any dim, and the causal mask, on every backend against index arithmetic
// written here.
#include <cmath>
#include <string>
#include <vector>

#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::host_values;

TEST(BackendTransformerShape, PermuteMovesEveryElement) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    // (2, 3, 4, 5) -> perm (2, 0, 3, 1): out[c, a, d, b'] = x[a, b', c, d]
    const Tensor hx = host_random({2, 3, 4, 5}, 4);
    const std::vector<float> xv = hx.to_vector();
    std::vector<float> want(xv.size());
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t bb = 0; bb < 3; ++bb)
        for (int64_t c = 0; c < 4; ++c)
          for (int64_t d = 0; d < 5; ++d) want[((c * 2 + a) * 5 + d) * 3 + bb] = xv[((a * 3 + bb) * 4 + c) * 5 + d];
    const std::vector<int64_t> perm{2, 0, 3, 1};
    const Tensor y = b->permute(hx.to(b->device()), perm);
    EXPECT_EQ(y.shape(), Shape({4, 2, 5, 3}));
    EXPECT_EQ(host_values(y), want);
    EXPECT_EQ(host_values(b->permute(hx.to(DType::f64).to(b->device()), perm)), want);  // 8-byte elements
    // A blocked 4-d input is read as plain.
    const Tensor hb = host_random({2, 16, 3, 3}, 5);
    const std::vector<int64_t> id{0, 1, 2, 3};
    EXPECT_EQ(host_values(b->permute(b->to_layout(hb.to(b->device()), Layout::nChw16c), id)), hb.to_vector());
  }
}

TEST(BackendTransformerShape, ConcatAndNarrowAreInverse) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE(dim);
      std::vector<int64_t> da{2, 3, 4}, db{2, 3, 4};
      db[dim] = 1;
      const Tensor ha = host_random(Shape(da), 6), hb = host_random(Shape(db), 7);
      const std::vector<Tensor> parts{ha.to(b->device()), hb.to(b->device())};
      const Tensor c = b->concat(parts, dim);
      std::vector<int64_t> dc = da;
      dc[dim] += 1;
      ASSERT_EQ(c.shape(), Shape(dc));
      // element by element against index arithmetic
      const std::vector<float> av = ha.to_vector(), bv = hb.to_vector(), cv = host_values(c);
      for (int64_t i = 0; i < dc[0]; ++i)
        for (int64_t j = 0; j < dc[1]; ++j)
          for (int64_t k = 0; k < dc[2]; ++k) {
            const int64_t idx[3] = {i, j, k};
            float want;
            if (idx[dim] < da[dim]) {
              want = av[(i * da[1] + j) * da[2] + k];
            } else {
              int64_t r[3] = {i, j, k};
              r[dim] -= da[dim];
              want = bv[(r[0] * db[1] + r[1]) * db[2] + r[2]];
            }
            ASSERT_EQ(cv[(i * dc[1] + j) * dc[2] + k], want);
          }
      EXPECT_EQ(host_values(b->narrow(c, dim, 0, da[dim])), av);
      EXPECT_EQ(host_values(b->narrow(c, dim, da[dim], 1)), bv);
    }
  }
}

TEST(BackendTransformerShape, CausalMaskFillsAboveTheShiftedDiagonal) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor hs = host_random({2, 3, 5}, 8);  // T = 3 queries, S = 5 keys: query i sees keys <= i + 2
    Tensor s = hs.to(b->device());
    b->causal_mask_fill(s);
    const std::vector<float> before = hs.to_vector(), after = host_values(s);
    for (int64_t m = 0; m < 2; ++m)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const size_t at = static_cast<size_t>((m * 3 + i) * 5 + j);
          if (j > i + 2) EXPECT_TRUE(std::isinf(after[at]) && after[at] < 0) << i << " " << j;
          else EXPECT_EQ(after[at], before[at]) << i << " " << j;
        }
  }
}

}  // namespace
}  // namespace packrat
