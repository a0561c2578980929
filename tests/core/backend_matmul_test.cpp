// The backend test, matmul section: batched matmul with either operand transposed and an
// optional bias, and column sums, on every backend against naive loops in double.
#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

// c[p, i, j] = bias[j] + sum_k A[p, i, k] * B[p, k, j], A and B read through the transposes.
std::vector<float> naive_matmul(const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb,
                                const std::vector<float>& bias, int64_t batch, int64_t M, int64_t K, int64_t N) {
  std::vector<float> c(static_cast<size_t>(batch * M * N));
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(j)];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t ai = p * M * K + (ta ? k * M + i : i * K + k);
          const int64_t bi = p * K * N + (tb ? j * K + k : k * N + j);
          s += double(a[static_cast<size_t>(ai)]) * b[static_cast<size_t>(bi)];
        }
        c[static_cast<size_t>((p * M + i) * N + j)] = static_cast<float>(s);
      }
  return c;
}

TEST(BackendMatmul, EveryTransposeBatchAndBiasMatchesNaiveLoopsOnEveryBackend) {
  struct Case {
    int64_t batch, M, K, N;
    bool ta, tb, bias;
  };
  const std::vector<Case> cases = {{1, 5, 7, 3, false, false, false}, {1, 5, 7, 3, false, true, true},
                                   {1, 6, 4, 9, true, false, false},  {1, 6, 4, 9, true, true, true},
                                   {3, 4, 5, 6, false, false, false}, {3, 4, 5, 6, true, true, false},
                                   {2, 1, 33, 17, false, true, true}};
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (size_t n = 0; n < cases.size(); ++n) {
      const Case c = cases[n];
      SCOPED_TRACE("case " + std::to_string(n));
      const Tensor ha = host_random(c.ta ? Shape{c.batch, c.K, c.M} : Shape{c.batch, c.M, c.K}, 10 + n);
      const Tensor hb = host_random(c.tb ? Shape{c.batch, c.N, c.K} : Shape{c.batch, c.K, c.N}, 20 + n);
      const Tensor hbias = c.bias ? host_random({c.N}, 30 + n) : Tensor();
      const Shape out = c.batch == 1 ? Shape{c.M, c.N} : Shape{c.batch, c.M, c.N};
      const Tensor y = b->matmul(ha.to(b->device()), c.ta, hb.to(b->device()), c.tb, c.batch, c.M, c.K, c.N,
                                 c.bias ? hbias.to(b->device()) : Tensor(), out);
      EXPECT_EQ(y.shape(), out);
      EXPECT_EQ(y.layout(), Layout::Plain);
      expect_close(host_values(y),
                   naive_matmul(ha.to_vector(), c.ta, hb.to_vector(), c.tb,
                                c.bias ? hbias.to_vector() : std::vector<float>(), c.batch, c.M, c.K, c.N),
                   1e-5f, 1e-5f, "c");
    }
  }
}

TEST(BackendMatmul, ColumnSumsMatchDoubleSumsOnEveryBackend) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t M = 301, N = 37;
    const Tensor hm = host_random({M, N}, 5);
    const std::vector<float> m = hm.to_vector();
    std::vector<float> want(static_cast<size_t>(N));
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t i = 0; i < M; ++i) s += m[static_cast<size_t>(i * N + j)];
      want[static_cast<size_t>(j)] = static_cast<float>(s);
    }
    const Tensor s = b->column_sums(hm.to(b->device()), M, N);
    EXPECT_EQ(s.shape(), Shape({N}));
    expect_close(host_values(s), want, 1e-6f, 1e-6f, "column sums");
  }
}

}  // namespace
}  // namespace packrat
