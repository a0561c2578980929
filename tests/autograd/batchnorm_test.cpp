// batchnorm2d: gradient checks (training and eval), running statistics as PyTorch updates
// them, layouts, what is saved, errors, and PyTorch goldens (tests/golden/make_dnnl_goldens.py).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/cpu/batchnorm.h"
#include "tests/golden/dnnl/golden.h"
#include "tests/support/gradcheck.h"
#include "tests/support/errors.h"
#include "tests/support/recording_policy.h"

using namespace packrat;
using packrat::testing::message_of;
using packrat::testing::RecordingPolicy;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {
Tensor param(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = random_tensor(s, seed, lo, hi);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST(BatchNormOpGrad, TrainingMode) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0f);
  gradcheck([&](const std::vector<Tensor>& t) { return ops::batchnorm2d(t[0], t[1], t[2], rm, rv, true); },
            {param({2, 3, 3, 3}, 1), param({3}, 2, 0.5f, 1.5f), param({3}, 3)});
}

TEST(BatchNormOpGrad, TrainingModeWithoutAffine) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0f);
  gradcheck([&](const std::vector<Tensor>& t) { return ops::batchnorm2d(t[0], Tensor(), Tensor(), rm, rv, true); },
            {param({2, 3, 2, 3}, 1)});
}

TEST(BatchNormOpGrad, EvalMode) {
  Tensor rm = random_tensor({3}, 4), rv = random_tensor({3}, 5, 0.5f, 2.0f);
  gradcheck([&](const std::vector<Tensor>& t) { return ops::batchnorm2d(t[0], t[1], t[2], rm, rv, false); },
            {param({2, 3, 3, 3}, 1), param({3}, 2, 0.5f, 1.5f), param({3}, 3)});
}

TEST(BatchNormOp, TrainingNormalizesAndUpdatesRunningStatisticsAsPyTorch) {
  const int64_t N = 3, C = 2, H = 2, W = 3, n = N * H * W;
  Tensor x = random_tensor({N, C, H, W}, 1, -2.0f, 3.0f);
  Tensor w = random_tensor({C}, 2), b = random_tensor({C}, 3);
  Tensor rm = Tensor::full({C}, 0.5f), rv = Tensor::full({C}, 2.0f);
  const int64_t v0 = rm.version(), v1 = rv.version();
  Tensor y = ops::batchnorm2d(x, w, b, rm, rv, true, 0.1f, 1e-5f);
  EXPECT_GT(rm.version(), v0);
  EXPECT_GT(rv.version(), v1);
  const auto xv = x.to_vector(), yv = y.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t s = 0; s < H * W; ++s) mean += xv[static_cast<size_t>((i * C + c) * H * W + s)];
    mean /= n;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t s = 0; s < H * W; ++s) sq += std::pow(xv[static_cast<size_t>((i * C + c) * H * W + s)] - mean, 2);
    const double var = sq / n;
    EXPECT_NEAR(rm.to_vector()[c], 0.9 * 0.5 + 0.1 * mean, 1e-5);
    EXPECT_NEAR(rv.to_vector()[c], 0.9 * 2.0 + 0.1 * var * n / (n - 1), 1e-5);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t s = 0; s < H * W; ++s) {
        const size_t k = static_cast<size_t>((i * C + c) * H * W + s);
        EXPECT_NEAR(yv[k], (xv[k] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c], 1e-4);
      }
  }
  // Eval mode uses the running statistics and leaves them alone.
  const auto rmv = rm.to_vector(), rvv = rv.to_vector();
  Tensor ye = ops::batchnorm2d(x, w, b, rm, rv, false);
  EXPECT_EQ(rm.to_vector(), rmv);
  EXPECT_NEAR(ye.to_vector()[0], (xv[0] - rmv[0]) / std::sqrt(rvv[0] + 1e-5) * wv[0] + bv[0], 1e-5);
}

TEST(BatchNormOp, PlainAndBlockedGiveTheSameResultsInTheirOwnLayout) {
  Tensor x = random_tensor({2, 16, 3, 3}, 1);
  Tensor w = param({16}, 2), b = param({16}, 3);
  std::vector<std::vector<float>> y, dx, dw, rm_after;
  for (Layout l : {Layout::Plain, Layout::nChw16c}) {
    Tensor rm = Tensor::zeros({16}), rv = Tensor::full({16}, 1.0f);
    Tensor xi = x.to_layout(l).clone();
    xi.set_requires_grad(true);
    w.zero_grad();
    Tensor out = ops::batchnorm2d(xi, w, b, rm, rv, true);
    EXPECT_EQ(out.layout(), l);
    backward(out, random_tensor(out.shape(), 9).to_layout(l));
    EXPECT_EQ(xi.grad().layout(), l);
    y.push_back(out.to_vector());
    dx.push_back(xi.grad().to_vector());
    dw.push_back(w.grad().to_vector());
    rm_after.push_back(rm.to_vector());
  }
  for (size_t i = 0; i < y[0].size(); ++i) ASSERT_NEAR(y[0][i], y[1][i], 1e-5);
  for (size_t i = 0; i < dx[0].size(); ++i) ASSERT_NEAR(dx[0][i], dx[1][i], 1e-5);
  for (size_t i = 0; i < dw[0].size(); ++i) ASSERT_NEAR(dw[0][i], dw[1][i], 1e-4);
  for (size_t i = 0; i < 16; ++i) ASSERT_NEAR(rm_after[0][i], rm_after[1][i], 1e-6);
}

TEST(BatchNormOp, SavesTheInputAsValueAndTheStatisticsExactly) {
  RecordingPolicy policy;
  PolicyScope scope(policy);
  LayerScope layer("bn1");
  Tensor x = param({2, 3, 2, 2}, 1), w = param({3}, 2), b = param({3}, 3);
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0f);
  Tensor y = ops::batchnorm2d(x, w, b, rm, rv, true);
  ASSERT_GE(policy.store.requests.size(), 3u);
  EXPECT_EQ(policy.store.requests[0].need, Need::Value);
  EXPECT_FALSE(policy.store.requests[0].exact);
  EXPECT_EQ(policy.store.requests[0].name, "bn1");
  EXPECT_TRUE(policy.store.requests[1].exact);
  EXPECT_TRUE(policy.store.requests[2].exact);
  clear_tape();
}

TEST(BatchNormOp, ErrorsNameTheOpTheLayerAndTheProblem) {
  LayerScope layer("layer1.0.bn1");
  Tensor rm = Tensor::zeros({64}), rv = Tensor::full({64}, 1.0f);
  Tensor x = random_tensor({2, 32, 2, 2}, 1);
  EXPECT_EQ(message_of([&] { ops::batchnorm2d(x, random_tensor({64}, 2), Tensor(), rm, rv, true); }),
            "batchnorm2d layer1.0.bn1: input has 32 channels, weight has shape (64,)");
  Tensor rm1 = Tensor::zeros({1}), rv1 = Tensor::full({1}, 1.0f);
  EXPECT_NE(message_of([&] { ops::batchnorm2d(random_tensor({1, 1, 1, 1}, 3), Tensor(), Tensor(), rm1, rv1, true); })
                .find("more than one value per channel"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ops::batchnorm2d(random_tensor({2, 3}, 3), Tensor(), Tensor(), rm1, rv1, true); })
                .find("batchnorm2d layer1.0.bn1: input must be 4-d"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ops::batchnorm2d(x.to(DType::f64), Tensor(), Tensor(), rm, rv, true); })
                .find("input has dtype f64"),
            std::string::npos);
}

TEST(BatchNormOpGolden, MatchesPyTorchOutputsGradientsAndRunningStatistics) {
  using namespace packrat::testing;
  const auto g = load_dnnl_golden("batchnorm.bin");
  for (const std::string name : {"bn3", "bn16"}) {
    for (Layout l : {Layout::Plain, Layout::nChw16c}) {
      if (l == Layout::nChw16c && golden(g, name + ".x").dim(1) % 16 != 0) continue;
      SCOPED_TRACE(name + " " + std::string(layout_name(l)));
      Tensor x = golden_leaf(g, name + ".x", l), w = golden_leaf(g, name + ".w"), b = golden_leaf(g, name + ".b");
      Tensor rm = golden(g, name + ".running_mean0").clone(), rv = golden(g, name + ".running_var0").clone();
      Tensor y = ops::batchnorm2d(x, w, b, rm, rv, true, 0.1f, 1e-5f);
      EXPECT_EQ(y.layout(), l);
      expect_matches_golden(y, golden(g, name + ".y"), "y");
      expect_matches_golden(rm, golden(g, name + ".running_mean"), "running_mean", 1e-6f);
      expect_matches_golden(rv, golden(g, name + ".running_var"), "running_var", 1e-6f);
      backward(y, golden(g, name + ".g").to_layout(l));
      expect_matches_golden(x.grad(), golden(g, name + ".gx"), "dx");
      expect_matches_golden(w.grad(), golden(g, name + ".gw"), "dw");
      expect_matches_golden(b.grad(), golden(g, name + ".gb"), "db");
      NoGradScope ng;
      expect_matches_golden(ops::batchnorm2d(x, w, b, rm, rv, false), golden(g, name + ".y_eval"), "y_eval");
    }
  }
}

TEST(BatchNormOp, LoopAndOneDnnKernelsAgreeInBothLayouts) {
  struct Result {
    std::vector<float> y, dx, dw, db, rm, rv, y_eval, dx_eval;
  };
  auto run = [](cpu::BatchNormKernel k, Layout l) {
    cpu::set_batchnorm_kernel(k);
    Result r;
    Tensor x = random_tensor({3, 32, 3, 5}, 1, -1.0f, 3.0f).to_layout(l).clone();
    x.set_requires_grad(true);
    Tensor w = param({32}, 2), b = param({32}, 3);
    Tensor rm = Tensor::zeros({32}), rv = Tensor::full({32}, 1.0f);
    Tensor seed = random_tensor(x.shape(), 4).to_layout(l);
    Tensor y = ops::batchnorm2d(x, w, b, rm, rv, true);
    backward(y, seed);
    r.y = y.to_vector(), r.dx = x.grad().to_vector(), r.dw = w.grad().to_vector(), r.db = b.grad().to_vector();
    r.rm = rm.to_vector(), r.rv = rv.to_vector();
    x.zero_grad();
    Tensor ye = ops::batchnorm2d(x, w, b, rm, rv, false);
    backward(ye, seed);
    r.y_eval = ye.to_vector(), r.dx_eval = x.grad().to_vector();
    cpu::set_batchnorm_kernel(cpu::BatchNormKernel::Loops);
    return r;
  };
  auto close = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1 + std::abs(b[i]))) << what << " " << i;
  };
  for (Layout l : {Layout::Plain, Layout::nChw16c}) {
    const Result a = run(cpu::BatchNormKernel::Loops, l), b = run(cpu::BatchNormKernel::Dnnl, l);
    close(a.y, b.y, "y");
    close(a.dx, b.dx, "dx");
    close(a.dw, b.dw, "dw");
    close(a.db, b.db, "db");
    close(a.rm, b.rm, "running_mean");
    close(a.rv, b.rv, "running_var");
    close(a.y_eval, b.y_eval, "y_eval");
    close(a.dx_eval, b.dx_eval, "dx_eval");
  }
}

TEST(BatchNormOp, LargeMeanSmallSpreadKeepsItsVariance) {
  // |mean| / std = 1e4: a naive E[x^2] - mean^2 in float would lose the variance entirely.
  Tensor x = random_tensor({4, 16, 5, 5}, 11, 99.99f, 100.01f).to_layout(Layout::nChw16c);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::full({16}, 1.0f);
  NoGradScope ng;
  ops::batchnorm2d(x, Tensor(), Tensor(), rm, rv, true, 1.0f, 1e-12f);
  const auto xv = x.to_vector(), var = rv.to_vector();
  for (int64_t c = 0; c < 16; ++c) {
    double m = 0, q = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 25; ++i) m += xv[static_cast<size_t>((n * 16 + c) * 25 + i)];
    m /= 100;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 25; ++i) q += std::pow(xv[static_cast<size_t>((n * 16 + c) * 25 + i)] - m, 2);
    EXPECT_NEAR(var[static_cast<size_t>(c)], q / 99, 1e-3 * q / 99) << "channel " << c;  // unbiased, momentum 1
  }
}
