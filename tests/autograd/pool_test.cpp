// Pooling: gradient checks, direct-loop references, layouts, what max pooling saves, errors,\n// and PyTorch goldens (tests/golden/make_dnnl_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
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
// Distinct values 0.1 apart in a shuffled order: no ties within a finite-difference step.
Tensor distinct_input(const Shape& s, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  PhiloxStream rng(seed, 1);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(rng.uniform() * i) % i]);
  for (float& x : v) x = 0.1f * x - 0.05f * static_cast<float>(v.size());
  Tensor t = Tensor::from_vector(s, v);
  t.set_requires_grad(true);
  return t;
}

// Direct loops: max or average (padding counted) over each window.
std::vector<float> naive_pool(const Tensor& x, const ops::Pool2dOptions& o, bool max) {
  const auto xv = x.to_vector();
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t OH = (H + 2 * o.pad_h - o.kernel_h) / o.stride_h + 1, OW = (W + 2 * o.pad_w - o.kernel_w) / o.stride_w + 1;
  std::vector<float> y;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        float m = -1e30f;
        double s = 0;
        for (int64_t kh = 0; kh < o.kernel_h; ++kh)
          for (int64_t kw = 0; kw < o.kernel_w; ++kw) {
            const int64_t h = i * o.stride_h - o.pad_h + kh, w = j * o.stride_w - o.pad_w + kw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const float v = xv[static_cast<size_t>((nc * H + h) * W + w)];
            m = std::max(m, v);
            s += v;
          }
        y.push_back(max ? m : static_cast<float>(s / static_cast<double>(o.kernel_h * o.kernel_w)));
      }
  return y;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}
}  // namespace

TEST(PoolOpGrad, MaxPool3x3Stride2Padded) {
  const ops::Pool2dOptions o{3, 3, 2, 2, 1, 1};
  gradcheck([&](const std::vector<Tensor>& t) { return ops::maxpool2d(t[0], o); }, {distinct_input({2, 3, 7, 7}, 1)});
}

TEST(PoolOpGrad, MaxPool2x2OddInputDropsTheLastRow) {
  const ops::Pool2dOptions o{2, 2, 2, 2, 0, 0};
  gradcheck([&](const std::vector<Tensor>& t) { return ops::maxpool2d(t[0], o); }, {distinct_input({1, 2, 5, 5}, 2)});
}

TEST(PoolOpGrad, AvgPoolPaddedAndStrided) {
  const ops::Pool2dOptions o{3, 2, 2, 1, 1, 1};
  Tensor x = random_tensor({2, 3, 6, 5}, 3);
  x.set_requires_grad(true);
  gradcheck([&](const std::vector<Tensor>& t) { return ops::avgpool2d(t[0], o); }, {x});
}

TEST(PoolOpGrad, AdaptiveAvgPoolEvenAndUnevenWindows) {
  Tensor x = random_tensor({2, 3, 6, 7}, 4);
  x.set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& t) { return ops::adaptive_avgpool2d(t[0], 1, 1); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return ops::adaptive_avgpool2d(t[0], 3, 7); }, {x});
  gradcheck([](const std::vector<Tensor>& t) { return ops::adaptive_avgpool2d(t[0], 4, 3); }, {x});
}

TEST(PoolOp, ForwardMatchesDirectLoops) {
  Tensor x = random_tensor({2, 3, 7, 6}, 5);
  for (const ops::Pool2dOptions& o : {ops::Pool2dOptions{3, 3, 2, 2, 1, 1}, ops::Pool2dOptions{2, 2, 2, 2, 0, 0},
                                      ops::Pool2dOptions{3, 2, 1, 2, 1, 0}}) {
    expect_close(ops::maxpool2d(x, o).to_vector(), naive_pool(x, o, true));
    expect_close(ops::avgpool2d(x, o).to_vector(), naive_pool(x, o, false));
  }
  // Uneven adaptive windows as PyTorch: 5 -> 3 uses rows [0,2), [1,4), [3,5).
  Tensor a = Tensor::from_vector({1, 1, 5, 1}, std::vector<float>{1, 2, 3, 4, 5});
  expect_close(ops::adaptive_avgpool2d(a, 3, 1).to_vector(), {1.5f, 3.0f, 4.5f});
}

TEST(PoolOp, PlainAndBlockedGiveTheSameResultsInTheirOwnLayout) {
  Tensor x = distinct_input({2, 16, 6, 6}, 6);
  const ops::Pool2dOptions o{3, 3, 2, 2, 1, 1};
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<Fn> fns = {[&](const Tensor& t) { return ops::maxpool2d(t, o); },
                               [&](const Tensor& t) { return ops::avgpool2d(t, o); },
                               [](const Tensor& t) { return ops::adaptive_avgpool2d(t, 1, 1); },
                               [](const Tensor& t) { return ops::adaptive_avgpool2d(t, 4, 4); }};
  for (const Fn& fn : fns) {
    std::vector<std::vector<float>> y, dx;
    for (Layout l : {Layout::Plain, Layout::nChw16c}) {
      Tensor xi = x.to_layout(l).clone();
      xi.set_requires_grad(true);
      Tensor out = fn(xi);
      EXPECT_EQ(out.layout(), l);
      backward(out, random_tensor(out.shape(), 7).to_layout(l));
      EXPECT_EQ(xi.grad().layout(), l);
      y.push_back(out.to_vector());
      dx.push_back(xi.grad().to_vector());
    }
    expect_close(y[0], y[1]);
    expect_close(dx[0], dx[1]);
  }
}

TEST(PoolOp, MaxPoolSavesOnlyTheIndexWithinTheWindowAndAvgPoolNothing) {
  RecordingPolicy policy;
  PolicyScope scope(policy);
  LayerScope layer("maxpool");
  Tensor x = distinct_input({1, 16, 8, 8}, 8);
  Tensor y = ops::maxpool2d(x, {3, 3, 2, 2, 1, 1});
  ASSERT_EQ(policy.store.requests.size(), 1u);
  EXPECT_EQ(policy.store.requests[0].need, Need::Index);
  EXPECT_EQ(policy.store.requests[0].index_bits, 4);  // 9 positions in a 3x3 window
  EXPECT_EQ(policy.store.requests[0].name, "maxpool");
  EXPECT_EQ(policy.store.dtypes[0], DType::u8);
  const auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].bytes, y.numel());  // one byte per output, not the f32 input
  ops::avgpool2d(x, {2, 2, 2, 2, 0, 0});
  ops::adaptive_avgpool2d(x, 1, 1);
  EXPECT_EQ(policy.store.requests.size(), 1u);
  backward(y, Tensor::full(y.shape(), 1.0f).to_layout(y.layout()));
  clear_tape();
  EXPECT_EQ(policy.store.live_count(), 0u);
}

TEST(PoolOp, ErrorsNameTheOpTheLayerAndTheProblem) {
  LayerScope layer("layer4.pool");
  Tensor x = random_tensor({1, 2, 2, 2}, 1);
  EXPECT_EQ(message_of([&] { ops::maxpool2d(x, {3, 3, 1, 1, 0, 0}); }),
            "maxpool2d layer4.pool: kernel 3x3 is larger than the padded input 2x2");
  EXPECT_EQ(message_of([&] { ops::avgpool2d(x, {2, 2, 1, 1, 2, 0}); }),
            "avgpool2d layer4.pool: padding (2, 0) must be between 0 and half the kernel 2x2");
  EXPECT_NE(message_of([&] { ops::maxpool2d(x.to(DType::f64), {1, 1, 1, 1, 0, 0}); })
                .find("maxpool2d layer4.pool: input has dtype f64"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ops::adaptive_avgpool2d(random_tensor({2, 3}, 1), 1, 1); })
                .find("adaptive_avgpool2d layer4.pool: input must be 4-d"),
            std::string::npos);
}

TEST(PoolOpGolden, MatchesPyTorchForwardAndGradientsInBothLayouts) {
  using namespace packrat::testing;
  const auto g = load_dnnl_golden("pool.bin");
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"max3s2p1", [](const Tensor& x) { return ops::maxpool2d(x, {3, 3, 2, 2, 1, 1}); }},
      {"max2s2", [](const Tensor& x) { return ops::maxpool2d(x, {2, 2, 2, 2, 0, 0}); }},
      {"avg3s2p1", [](const Tensor& x) { return ops::avgpool2d(x, {3, 3, 2, 2, 1, 1}); }},
      {"avg_k3x2_s2x1_p1x1", [](const Tensor& x) { return ops::avgpool2d(x, {3, 2, 2, 1, 1, 1}); }},
      {"adaptive1", [](const Tensor& x) { return ops::adaptive_avgpool2d(x, 1, 1); }},
      {"adaptive3x2", [](const Tensor& x) { return ops::adaptive_avgpool2d(x, 3, 2); }}};
  for (const auto& [name, fn] : cases)
    for (Layout l : {Layout::Plain, Layout::nChw16c}) {
      if (l == Layout::nChw16c && golden(g, name + ".x").dim(1) % 16 != 0) continue;
      SCOPED_TRACE(name + " " + std::string(layout_name(l)));
      Tensor x = golden_leaf(g, name + ".x", l);
      Tensor y = fn(x);
      EXPECT_EQ(y.layout(), l);
      expect_matches_golden(y, golden(g, name + ".y"), "y");
      backward(y, golden(g, name + ".g").to_layout(l));
      expect_matches_golden(x.grad(), golden(g, name + ".gx"), "dx");
    }
}
