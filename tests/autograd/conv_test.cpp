// conv2d: gradient checks for every geometry the op promises, layout behaviour, the weight
// cache, error messages, and PyTorch goldens (tests/golden/make_dnnl_goldens.py).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"
#include "core/cpu/conv.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/layout.h"
#include "core/cpu/weight_cache.h"
#include "tests/golden/dnnl/golden.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

Tensor param(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed);
  t.set_requires_grad(true);
  return t;
}

void check_conv(const Shape& xs, const Shape& ws, bool bias, const ops::Conv2dOptions& o) {
  std::vector<Tensor> in = {param(xs, 1), param(ws, 2)};
  if (bias) in.push_back(param(Shape{ws[0]}, 3));
  gradcheck([&](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], bias ? t[2] : Tensor(), o); }, in);
}

// Direct loops: y[n,o,i,j] = b[o] + sum_{c,kh,kw} x[n, g*cg + c, i*s - p + kh*d, j*s - p + kw*d] * w[o,c,kh,kw]
std::vector<float> naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dOptions& o,
                              int64_t OH, int64_t OW) {
  const auto xv = x.to_vector(), wv = w.to_vector();
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), O = w.dim(0), CG = w.dim(1), KH = w.dim(2),
                KW = w.dim(3), OG = O / o.groups;
  std::vector<float> y(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double s = b.defined() ? b.to_vector()[static_cast<size_t>(oc)] : 0.0;
          const int64_t g = oc / OG;
          for (int64_t c = 0; c < CG; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t h = i * o.stride_h - o.pad_h + kh * o.dilation_h;
                const int64_t ww = j * o.stride_w - o.pad_w + kw * o.dilation_w;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += xv[static_cast<size_t>(((n * C + g * CG + c) * H + h) * W + ww)] *
                     wv[static_cast<size_t>(((oc * CG + c) * KH + kh) * KW + kw)];
              }
          y[static_cast<size_t>(((n * O + oc) * OH + i) * OW + j)] = static_cast<float>(s);
        }
  return y;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-4f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

}  // namespace

TEST(Conv2dOpGrad, Basic3x3WithBias) { check_conv({2, 3, 5, 5}, {4, 3, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}); }
TEST(Conv2dOpGrad, StridedPaddedNoBias) { check_conv({2, 3, 7, 6}, {4, 3, 3, 3}, false, {2, 2, 1, 1, 1, 1, 1}); }
TEST(Conv2dOpGrad, AsymmetricStrideAndPadding) { check_conv({1, 2, 7, 8}, {3, 2, 3, 2}, true, {2, 1, 0, 2, 1, 1, 1}); }
TEST(Conv2dOpGrad, Dilated) { check_conv({1, 2, 7, 7}, {3, 2, 3, 3}, true, {1, 1, 2, 2, 2, 2, 1}); }
TEST(Conv2dOpGrad, Grouped) { check_conv({2, 4, 5, 5}, {6, 2, 3, 3}, true, {1, 1, 1, 1, 1, 1, 2}); }
TEST(Conv2dOpGrad, Depthwise) { check_conv({2, 4, 5, 5}, {4, 1, 3, 3}, false, {1, 1, 1, 1, 1, 1, 4}); }
// ResNet's downsample: the right padding oneDNN needs is negative (even input, stride 2).
TEST(Conv2dOpGrad, Pointwise1x1Stride2EvenInput) { check_conv({2, 3, 6, 6}, {4, 3, 1, 1}, false, {2, 2, 0, 0, 1, 1, 1}); }

TEST(Conv2dOp, ForwardMatchesDirectLoopsForEveryGeometry) {
  struct Case {
    Shape x, w;
    ops::Conv2dOptions o;
  };
  const std::vector<Case> cases = {{{2, 3, 6, 5}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
                                   {{1, 16, 9, 9}, {32, 16, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
                                   {{1, 32, 8, 8}, {32, 1, 3, 3}, {1, 1, 2, 2, 2, 2, 32}},
                                   {{1, 32, 6, 6}, {16, 8, 1, 1}, {2, 2, 0, 0, 1, 1, 4}},
                                   {{1, 40, 4, 4}, {80, 40, 1, 1}, {1, 1, 0, 0, 1, 1, 1}},
                                   {{1, 16, 5, 5}, {8, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
                                   {{1, 40, 5, 5}, {40, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 40}}};
  for (const auto& c : cases) {
    Tensor x = random_tensor(c.x, 7), w = random_tensor(c.w, 8), b = random_tensor(Shape{c.w[0]}, 9);
    Tensor y = ops::conv2d(x, w, b, c.o);
    const int64_t OH = y.dim(2), OW = y.dim(3);
    expect_close(y.to_vector(), naive_conv(x, w, b, c.o, OH, OW));
  }
}

TEST(Conv2dOp, OutputIsBlockedWhenOutputChannelsFillTheCpusChannelBlocks) {
  const cpu::ActivationLayoutScope automatic(cpu::ActivationLayout::Auto);  // f32: blocked, whatever the environment asks
  // oneDNN's jit kernels write nChw16c on AVX-512 and nChw8c on AVX2 (its only kernel for the other
  // block there is the reference one): the output is in this CPU's block where the channels fill it.
  const Layout blocked = cpu::native_blocked_layout();
  EXPECT_EQ(blocked, cpu::avx512_kernels() ? Layout::nChw16c : Layout::nChw8c);
  Tensor x = random_tensor({1, 3, 8, 8}, 1);
  EXPECT_EQ(ops::conv2d(x, random_tensor({16, 3, 3, 3}, 2), Tensor(), {}).layout(), blocked);
  EXPECT_EQ(ops::conv2d(x, random_tensor({8, 3, 3, 3}, 2), Tensor(), {}).layout(),
            channel_block(blocked) == 8 ? blocked : Layout::Plain);
  EXPECT_EQ(ops::conv2d(x, random_tensor({12, 3, 3, 3}, 2), Tensor(), {}).layout(), Layout::Plain);
  const ConvGeometry g16{1, 3, 8, 8, 16, 3, 3, 6, 6, 1, 1, 0, 0, 1, 1, 1, false};
  EXPECT_EQ(cpu::conv_layouts(g16).dst, blocked);
  EXPECT_NE(cpu::conv_layouts(g16).implementation.rfind("ref", 0), 0u) << cpu::conv_layouts(g16).implementation;
}

TEST(Conv2dOp, PlainAndBlockedInputsGiveTheSameResultsAndGradientsInTheirOwnLayout) {
  Tensor x = random_tensor({2, 16, 6, 6}, 1);
  Tensor w = random_tensor({32, 16, 3, 3}, 2), b = random_tensor({32}, 3);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  std::vector<std::vector<float>> y, dx, dw, db;
  for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c}) {
    SCOPED_TRACE(layout_name(l));
    Tensor xi = x.to_layout(l).clone();
    xi.set_requires_grad(true);
    w.zero_grad();
    b.zero_grad();
    Tensor out = ops::conv2d(xi, w, b, {1, 1, 1, 1, 1, 1, 1});
    Tensor seed = random_tensor(out.shape(), 4).to_layout(out.layout());
    backward(out, seed);
    EXPECT_EQ(xi.grad().layout(), l);
    EXPECT_EQ(w.grad().layout(), Layout::Plain);
    y.push_back(out.to_vector());
    dx.push_back(xi.grad().to_vector());
    dw.push_back(w.grad().to_vector());
    db.push_back(b.grad().to_vector());
  }
  for (size_t i = 1; i < y.size(); ++i) {
    expect_close(y[0], y[i], 1e-5f);
    expect_close(dx[0], dx[i], 1e-5f);
    expect_close(dw[0], dw[i], 1e-4f);
    expect_close(db[0], db[i], 1e-4f);
  }
}

// Channels-last activations (what a CPU with AMX runs for 16-bit convolutions; here asked for on
// any CPU): a convolution writes NHWC and reads it as it lies, and batchnorm, the activation and the
// residual addition between two convolutions keep it, so no reorder surrounds a kernel; the step's
// values and gradients are the blocked step's.
TEST(Conv2dOp, ChannelsLastActivationsStayNhwcBetweenConvolutionsWithTheBlockedStepsGradients) {
  using cpu::ActivationLayout;
  {
    cpu::ActivationLayoutScope automatic(ActivationLayout::Auto);
    EXPECT_FALSE(cpu::channels_last_convolutions(DType::f32)) << "f32 keeps Winograd's blocked tensors";
    EXPECT_EQ(cpu::channels_last_convolutions(DType::bf16), cpu::amx_kernels());
  }
  std::vector<DType> dtypes = {DType::f32};
  if (backend(Device::cpu()).conv_computes_in(DType::bf16)) dtypes.push_back(DType::bf16);
  for (DType dtype : dtypes) {
    std::vector<float> values[2][5];  // (blocked, channels-last) x (y, dx, dw1, dw2, dgamma)
    for (int m = 0; m < 2; ++m) {
      const bool channels_last = m == 1;
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), channels_last ? "channels-last" : "blocked"));
      cpu::ActivationLayoutScope scope(channels_last ? ActivationLayout::ChannelsLast : ActivationLayout::Blocked);
      Tensor x = param({2, 16, 8, 8}, 1), w1 = param({32, 16, 3, 3}, 2), w2 = param({32, 32, 3, 3}, 3);
      Tensor gamma = param({32}, 4), beta = param({32}, 5);
      Tensor running_mean = Tensor::zeros({32}), running_var = Tensor::full({32}, 1.0f);
      Tensor c1, bn, act, y;
      {
        AutocastScope autocast(dtype);
        c1 = ops::conv2d(x, w1, Tensor(), {1, 1, 1, 1, 1, 1, 1});
        bn = ops::batchnorm2d(c1, gamma, beta, running_mean, running_var, true);
        act = ops::relu(bn);
        y = ops::add(ops::conv2d(act, w2, Tensor(), {1, 1, 1, 1, 1, 1, 1}), c1);  // two convolutions' outputs
      }
      if (channels_last)
        for (const Tensor* t : {&c1, &bn, &act, &y}) EXPECT_EQ(t->layout(), Layout::NHWC);
      else
        EXPECT_EQ(y.layout(), cpu::native_blocked_layout());
      backward(y, random_tensor(y.shape(), 6).to_layout(y.layout()));  // an f32 gradient, as every gradient is
      EXPECT_EQ(x.grad().layout(), Layout::Plain) << "the input's gradient in the input's layout";
      values[m][0] = y.to(DType::f32).to_vector();
      values[m][1] = x.grad().to_vector();
      values[m][2] = w1.grad().to_vector();
      values[m][3] = w2.grad().to_vector();
      values[m][4] = gamma.grad().to_vector();
    }
    // Relative to the largest value: the kernels of the two layouts may sum in other orders, and
    // under bf16 y is rounded to 8 significant bits.
    const float tol = dtype == DType::f32 ? 1e-5f : 2e-2f;
    for (int k = 0; k < 5; ++k) {
      SCOPED_TRACE(fmt::format("{} value {}", dtype_name(dtype), k));
      float scale = 1.0f;
      for (float v : values[0][k]) scale = std::max(scale, std::abs(v));
      expect_close(values[0][k], values[1][k], tol * scale);
    }
  }
}

TEST(Conv2dOp, GradientOfABlockedOutputFlowsBackToAPlainInput) {
  Tensor x = param({1, 3, 5, 5}, 1), w = param({16, 3, 3, 3}, 2);
  gradcheck([](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], Tensor(), {1, 1, 1, 1, 1, 1, 1}); },
            {x, w});
}

TEST(Conv2dOp, SavesNothingWithoutGradAndReleasesEverythingAfterBackward) {
  auto& a = Allocator::cpu();
  const int64_t saved0 = a.current(MemTag::Saved), act0 = a.current(MemTag::Activation);
  {
    Tensor x = param({2, 16, 6, 6}, 1), w = param({16, 16, 3, 3}, 2);
    Tensor y = ops::conv2d(x, w, Tensor(), {1, 1, 1, 1, 1, 1, 1});
    EXPECT_GT(a.current(MemTag::Saved), saved0);  // x is held for the weight gradient
    backward(y, Tensor::full(y.shape(), 1.0f).to_layout(y.layout()));
    EXPECT_EQ(a.current(MemTag::Saved), saved0);
  }
  EXPECT_EQ(a.current(MemTag::Activation), act0);
  {
    NoGradScope ng;
    Tensor x = param({2, 16, 6, 6}, 1), w = param({16, 16, 3, 3}, 2);
    ops::conv2d(x, w, Tensor(), {});
    EXPECT_EQ(tape_size(), 0u);
  }
}

// A residual block's input gets two gradients, the shortcut's and then the convolution's: the
// tape offers the first to the convolution, which adds its own into it in place (cuDNN's beta = 1
// on a GPU; here the backend's in-place accumulate). The same bits as a separate add, and one
// gradient buffer fewer at the peak: shortcut + relu's + the convolution's, not also their sum.
TEST(Conv2dOp, AResidualInputTakesTheConvolutionsGradientInPlace) {
  const cpu::ActivationLayoutScope automatic(cpu::ActivationLayout::Auto);  // f32: blocked, whatever the environment asks
  const ops::Conv2dOptions same{1, 1, 1, 1, 1, 1, 1};
  const Shape xs{8, 12, 16, 16};  // 12 channels: everything stays plain on the CPU
  const int64_t S = xs.numel() * 4;
  const Tensor input = param(xs, 1), w = param({12, 12, 3, 3}, 2);
  Tensor seed;
  {
    TagScope tag(MemTag::Workspace);
    seed = random_tensor(xs, 3);
  }
  Allocator& a = Allocator::cpu();
  const int64_t before = a.current(MemTag::Gradient);
  {
    const Tensor x = ops::scale(input, 1.0f);  // not a leaf: its gradient can be summed into
    const Tensor out = ops::scale(ops::add(ops::relu(ops::conv2d(x, w, Tensor(), same)), x), 1.0f);
    a.reset_peak();
    backward(out, seed);
  }
  const int64_t peak = a.peak(MemTag::Gradient) - before;
  EXPECT_LT(peak, 4 * S) << "the convolution's input gradient was added out of place";
  EXPECT_GE(peak, 3 * S);
  // The reference: the convolution's input gradient alone (a leaf's), plus the shortcut's.
  Tensor x_leaf = input.clone(), w_leaf = w.clone();
  x_leaf.set_requires_grad(true);
  w_leaf.set_requires_grad(true);
  backward(ops::relu(ops::conv2d(x_leaf, w_leaf, Tensor(), same)), seed);
  std::vector<float> want = x_leaf.grad().to_vector();
  const std::vector<float> shortcut = seed.to_vector();
  for (size_t i = 0; i < want.size(); ++i) want[i] += shortcut[i];
  EXPECT_EQ(input.grad().to_vector(), want);
  EXPECT_EQ(w.grad().to_vector(), w_leaf.grad().to_vector());
}

TEST(Conv2dOp, WeightCacheReordersOncePerVersion) {
  // oneDNN's jit kernels (AVX-512's and AVX2's) read blocked weights: each miss below is one
  // reorder. A gemm kernel would read the plain weight in place: no reorder, nothing held. (The
  // cache's own rules are checked on every machine by WeightCache.ReordersOncePerVersion.)
  const ConvGeometry g{1, 16, 6, 6, 32, 3, 3, 4, 4, 1, 1, 0, 0, 1, 1, 1, false};
  const bool blocked_weights = !cpu::conv_layouts(g).plain_weights;
  EXPECT_TRUE(blocked_weights) << cpu::conv_layouts(g).implementation;
  const int64_t k = blocked_weights ? 1 : 0;  // reorders per miss
  auto expect_held = [&](bool held) {
    if (held && blocked_weights) {
      EXPECT_GT(cpu::weight_cache_bytes(), 0);
    } else {
      EXPECT_EQ(cpu::weight_cache_bytes(), 0);
    }
  };
  cpu::clear_weight_cache();
  Tensor x = random_tensor({1, 16, 6, 6}, 1).to_layout(Layout::nChw16c);
  Tensor w = Tensor::empty({32, 16, 3, 3}, DType::f32, Layout::Plain, MemTag::Parameter);  // a model parameter
  std::ranges::copy(random_tensor({32, 16, 3, 3}, 2).span<float>(), w.span<float>().begin());
  ops::conv2d(x, w, Tensor(), {});
  const int64_t r0 = cpu::weight_cache_reorders();
  Tensor y1 = ops::conv2d(x, w, Tensor(), {});
  EXPECT_EQ(cpu::weight_cache_reorders(), r0) << "an unchanged weight must come from the cache";
  expect_held(true);
  // An in-place update (as the optimizer does) bumps the version: the cache must not serve stale data.
  for (float& v : w.span<float>()) v *= 2.0f;
  w.bump_version();
  Tensor y2 = ops::conv2d(x, w, Tensor(), {});
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + k);
  const auto a = y1.to_vector(), b = y2.to_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], 2.0f * a[i], 1e-4f);
  // A training forward (the weight requires grad, the optimizer will change it) keeps no copy,
  // and frees the one it made stale.
  w.set_requires_grad(true);
  w.bump_version();
  ops::conv2d(x, w, Tensor(), {});
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 2 * k);
  expect_held(false);
  clear_tape();
  {
    NoGradScope eval;  // eval: kept again
    ops::conv2d(x, w, Tensor(), {});
    ops::conv2d(x, w, Tensor(), {});
    EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 3 * k);
    expect_held(true);
  }
  // A tensor that is not a parameter is never cached (a gradient check perturbs it in place).
  Tensor other = random_tensor({32, 16, 3, 3}, 3);
  const int64_t held = cpu::weight_cache_bytes();
  ops::conv2d(x, other, Tensor(), {});
  ops::conv2d(x, other, Tensor(), {});
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 5 * k);
  EXPECT_EQ(cpu::weight_cache_bytes(), held);
  w = Tensor();  // a freed weight's entry no longer counts
  if (blocked_weights) {
    EXPECT_LT(cpu::weight_cache_bytes(), held);
  } else {
    EXPECT_EQ(cpu::weight_cache_bytes(), 0);
  }
  cpu::clear_weight_cache();
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);
}

TEST(Conv2dOp, ErrorsNameTheOpTheLayerAndTheProblem) {
  LayerScope layer("layer1.0.conv1");
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor x = random_tensor({1, 3, 8, 8}, 1);
  EXPECT_EQ(message([&] { ops::conv2d(x, random_tensor({8, 64, 3, 3}, 2), Tensor(), {}); }),
            "conv2d layer1.0.conv1: input has 3 channels, weight expects 64");
  EXPECT_NE(message([&] { ops::conv2d(x, random_tensor({8, 3, 11, 11}, 2), Tensor(), {}); })
                .find("conv2d layer1.0.conv1: kernel 11x11"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::conv2d(x.to(DType::f64), random_tensor({8, 3, 3, 3}, 2), Tensor(), {}); })
                .find("conv2d layer1.0.conv1: input has dtype f64"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::conv2d(x, random_tensor({8, 3, 3, 3}, 2), random_tensor({4}, 3), {}); })
                .find("bias has shape (4,)"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::conv2d(x, random_tensor({8, 1, 3, 3}, 2), Tensor(), {1, 1, 0, 0, 1, 1, 2}); })
                .find("input has 3 channels, not divisible by groups=2"),
            std::string::npos);
}

TEST(Conv2dOpGolden, MatchesPyTorchForwardAndGradientsInBothLayouts) {
  using namespace packrat::testing;
  const auto g = load_dnnl_golden("conv.bin");
  for (const std::string name :
       {"basic", "strided_dilated_grouped", "depthwise16", "resnet_down16to32", "pointwise_stride2"}) {
    const auto opt = golden(g, name + ".options").to_vector();
    const ops::Conv2dOptions o{int64_t(opt[0]), int64_t(opt[1]), int64_t(opt[2]), int64_t(opt[3]),
                               int64_t(opt[4]), int64_t(opt[5]), int64_t(opt[6])};
    const bool has_bias = g.count(name + ".b") > 0;
    const int64_t channels = golden(g, name + ".x").dim(1);
    for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c}) {
      if (l != Layout::Plain && channels % channel_block(l) != 0) continue;
      SCOPED_TRACE(name + " " + std::string(layout_name(l)));
      Tensor x = golden_leaf(g, name + ".x", l), w = golden_leaf(g, name + ".w");
      Tensor b = has_bias ? golden_leaf(g, name + ".b") : Tensor();
      Tensor y = ops::conv2d(x, w, b, o);
      expect_matches_golden(y, golden(g, name + ".y"), "y");
      backward(y, golden(g, name + ".g").to_layout(y.layout()));
      expect_matches_golden(x.grad(), golden(g, name + ".gx"), "dx");
      expect_matches_golden(w.grad(), golden(g, name + ".gw"), "dw");
      if (has_bias) expect_matches_golden(b.grad(), golden(g, name + ".gb"), "db");
    }
  }
}

TEST(Conv2dOp, NoGeometryOfACommonModelFallsToTheReferenceKernel) {
  const cpu::ActivationLayoutScope automatic(cpu::ActivationLayout::Auto);  // f32: blocked, whatever the environment asks
  // EfficientNet-style channel counts mix multiples of 16 with others (24, 40): a plain/blocked
  // mix that only ref:any serves must be avoided by running both sides plain.
  struct Case {
    int64_t cin, cout, k, groups;
  };
  for (const Case c : {Case{3, 64, 3, 1}, Case{64, 64, 3, 1}, Case{64, 128, 1, 1}, Case{40, 80, 1, 1},
                       Case{16, 8, 3, 1}, Case{24, 144, 1, 1}, Case{144, 24, 1, 1}, Case{40, 40, 3, 40},
                       Case{32, 32, 3, 32}, Case{3, 16, 3, 1}, Case{32, 16, 1, 4}}) {
    ConvGeometry g{8, c.cin, 16, 16, c.cout, c.k, c.k, 16, 16, 1, 1, c.k / 2, c.k / 2, 1, 1, c.groups, false};
    const cpu::ConvLayouts l = cpu::conv_layouts(g);
    EXPECT_NE(l.implementation.rfind("ref", 0), 0u) << c.cin << " -> " << c.cout << ": " << l.implementation;
    const auto [bwd_data, bwd_weights] = cpu::conv_backward_implementations(g);
    EXPECT_NE(bwd_data.rfind("ref", 0), 0u) << c.cin << " -> " << c.cout << " backward data: " << bwd_data;
    EXPECT_NE(bwd_weights.rfind("ref", 0), 0u) << c.cin << " -> " << c.cout << " backward weights: " << bwd_weights;
    const Layout blocked = cpu::native_blocked_layout();  // nChw16c on AVX-512, nChw8c on AVX2
    const int64_t block = channel_block(blocked);
    if (c.cin % block == 0 && c.cout % block == 0 && (c.groups == 1 || c.groups == c.cin)) {  // grouped: plain
      EXPECT_EQ(l.src, blocked);
      EXPECT_EQ(l.dst, blocked);
    }
  }
}

TEST(Conv2dOp, ConvolutionsOfResNetAndEfficientNetRunOnFastKernelsWithOrWithoutAvx512) {
  const cpu::ActivationLayoutScope automatic(cpu::ActivationLayout::Auto);  // f32: blocked, whatever the environment asks
  // oneDNN's im2col + gemm kernels ran up to 25x slower than its jit ones on an AVX2 EPYC (3x on
  // ResNet's first stage; docs/measurements-cpu.md, "Without AVX-512"). Without AVX-512 the jit kernels read and
  // write nChw8c: the convolutions' tensors are nChw8c where their channels fill its blocks; where
  // they do not, the tensors stay plain and each call reorders into Workspace buffers of the
  // kernel's format, which the allocator counts.
  // The one exception is the data gradient of a convolution whose input fills no channel block
  // (an image's 3 channels) on AVX-512: oneDNN may serve it by gemm on plain tensors (a Zen 4 does;
  // an Intel Xeon picked a jit kernel), which ran 2x faster there than its jit kernel on blocked
  // copies (batch 64, 3 -> 64 at 32x32: 31-33 against 63-66 ms, 2 threads). What packrat promises
  // is a fast kernel, never the reference one, not which of oneDNN's good kernels a CPU gets.
  struct Case {
    int64_t cin, cout, k, stride, groups;
  };
  for (const Case c : {Case{3, 64, 3, 1, 1}, Case{64, 64, 3, 1, 1}, Case{64, 128, 3, 2, 1}, Case{64, 128, 1, 2, 1},
                       Case{16, 96, 1, 1, 1}, Case{96, 96, 3, 1, 96}, Case{240, 240, 5, 1, 240}}) {
    const int64_t o = (16 + 2 * (c.k / 2) - c.k) / c.stride + 1;
    ConvGeometry g{8, c.cin, 16, 16, c.cout, c.k, c.k, o, o, c.stride, c.stride, c.k / 2, c.k / 2, 1, 1, c.groups, false};
    const std::string what = fmt::format("{} -> {} {}x{} groups {}", c.cin, c.cout, c.k, c.k, c.groups);
    const std::string forward = cpu::conv_layouts(g).implementation;
    const auto [bwd_data, bwd_weights] = cpu::conv_backward_implementations(g);
    EXPECT_EQ(forward.rfind("jit", 0), 0u) << what << ": " << forward;
    const bool jit = bwd_data.rfind("jit", 0) == 0, gemm = bwd_data.find(":gemm:") != std::string::npos;
    const bool gemm_is_fast = cpu::avx512_kernels() && c.cin < channel_block(cpu::native_blocked_layout());
    EXPECT_TRUE(jit || (gemm_is_fast && gemm)) << what << " backward data: " << bwd_data;
    // packrat's own loops where oneDNN's kernels were slower (core/cpu/depthwise_conv.h, conv.cpp's
    // weight_gradient_as_matmul)
    const bool own = bwd_weights == "packrat:depthwise" || bwd_weights == "packrat:matmul";
    EXPECT_TRUE(bwd_weights.rfind("jit", 0) == 0 || own) << what << " backward weights: " << bwd_weights;
  }
  if (cpu::avx512_kernels()) return;
  ops::Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  const Tensor x16 = random_tensor({2, 16, 8, 8}, 1).to_layout(Layout::nChw8c);
  const Tensor w32 = random_tensor({32, 16, 3, 3}, 2);
  const Tensor y32 = ops::conv2d(x16, w32, Tensor(), o);
  EXPECT_EQ(y32.layout(), Layout::nChw8c);
  expect_close(y32.to_vector(), naive_conv(x16, w32, Tensor(), o, 8, 8));
  // 12 -> 20 channels fill no block: plain tensors, nChw8c copies padded to 16 and 24 channels.
  const Tensor x = random_tensor({2, 12, 8, 8}, 1), w = random_tensor({20, 12, 3, 3}, 2);
  EXPECT_EQ(cpu::conv_layouts(ConvGeometry{2, 12, 8, 8, 20, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, false})
                .implementation.rfind("jit", 0),
            0u);
  Allocator& a = Allocator::cpu();
  a.reset_peak();
  const int64_t before = a.current(MemTag::Workspace);
  const Tensor y = ops::conv2d(x, w, Tensor(), o);
  EXPECT_EQ(y.layout(), Layout::Plain);
  // The input's and the output's copies, padded to whole blocks and alive together.
  EXPECT_GE(a.peak(MemTag::Workspace) - before, (2 * 16 * 8 * 8 + 2 * 24 * 8 * 8) * 4);
  expect_close(y.to_vector(), naive_conv(x, w, Tensor(), o, 8, 8));
}

namespace packrat {
namespace {

TEST(Conv2dOp, APointwiseWeightGradientOverPixelRowsIsOneMatmul) {
  // dW = gy^T x where both buffers are (pixels, channels) matrices: squeeze-and-excitation's 1x1
  // planes (any layout), and stride-1 pointwise convolutions on NHWC activations. oneDNN's gemm
  // convolution ran one tiny gemm a sample there (0.83 ms for 28 -> 672 at batch 32).
  const cpu::ActivationLayoutScope channels_last(cpu::ActivationLayout::ChannelsLast);
  struct Case {
    int64_t n, cin, hw, cout, stride;
    bool bias;
  };
  for (const Case c : {Case{32, 28, 1, 672, 1, true}, Case{4, 32, 6, 48, 1, false}, Case{4, 32, 6, 48, 2, false}}) {
    const int64_t o = (c.hw - 1) / c.stride + 1;
    const ConvGeometry g{c.n, c.cin, c.hw, c.hw, c.cout, 1, 1, o, o, c.stride, c.stride, 0, 0, 1, 1, 1, c.bias};
    const std::string bwd_weights = cpu::conv_backward_implementations(g).second;
    const bool rows = c.stride == 1 && (c.hw == 1 || cpu::conv_layouts(g).src == Layout::NHWC);
    EXPECT_EQ(bwd_weights == "packrat:matmul", rows) << g.key() << ": " << bwd_weights;
    const Layout layout = c.hw == 1 ? Layout::Plain : cpu::conv_layouts(g).src;
    const Tensor x = random_tensor({c.n, c.cin, c.hw, c.hw}, 5), gy = random_tensor({c.n, c.cout, o, o}, 6);
    Tensor gw, gb;
    cpu::conv_backward_weights(x.to_layout(layout), gy.to_layout(cpu::conv_layouts(g).dst), g, gw, gb);
    ASSERT_EQ(gw.shape(), Shape({c.cout, c.cin, 1, 1}));
    const std::vector<float> xs = x.to_vector(), gys = gy.to_vector(), gws = gw.to_vector();
    for (int64_t oc = 0; oc < c.cout; oc += 7)
      for (int64_t ic = 0; ic < c.cin; ic += 3) {
        double want = 0, bias = 0;
        for (int64_t n = 0; n < c.n; ++n)
          for (int64_t i = 0; i < o; ++i)
            for (int64_t j = 0; j < o; ++j) {
              const double gv = gys[static_cast<size_t>(((n * c.cout + oc) * o + i) * o + j)];
              want += gv * xs[static_cast<size_t>(((n * c.cin + ic) * c.hw + i * c.stride) * c.hw + j * c.stride)];
              bias += gv;
            }
        EXPECT_NEAR(gws[static_cast<size_t>(oc * c.cin + ic)], want, 1e-4 * (1 + std::abs(want))) << g.key();
        if (c.bias && ic == 0) EXPECT_NEAR(gb.to_vector()[static_cast<size_t>(oc)], bias, 1e-4 * (1 + std::abs(bias)));
      }
  }
}

TEST(Conv2dOp, DepthwiseWeightGradientNeverRunsOnGemm) {
  // oneDNN 2.6 has no jit_dw backward-weights kernel for 5x5 kernels or inputs smaller than the
  // kernel; its gemm fallback took 20-40 ms per EfficientNet-B0 layer at batch 32 (a third of the
  // step on an AVX2 EPYC). These get packrat's own loop (core/cpu/depthwise_conv.h) on every CPU,
  // with or without AVX-512; backend_conv_test checks its gradients for plain and blocked inputs.
  struct Case {
    int64_t c, hw, k, stride;
  };
  for (const Case c : {Case{1152, 2, 5, 1}, Case{1152, 2, 3, 1}, Case{672, 4, 5, 2}, Case{240, 8, 5, 1},
                       Case{144, 16, 5, 2}, Case{480, 4, 3, 1}}) {
    const int64_t o = (c.hw + 2 * (c.k / 2) - c.k) / c.stride + 1;
    ConvGeometry g{32, c.c, c.hw, c.hw, c.c, c.k, c.k, o, o, c.stride, c.stride, c.k / 2, c.k / 2, 1, 1, c.c, false};
    const std::string bwd_weights = cpu::conv_backward_implementations(g).second;
    EXPECT_EQ(bwd_weights.find("gemm"), std::string::npos) << g.key() << ": " << bwd_weights;
    EXPECT_NE(bwd_weights.rfind("ref", 0), 0u) << g.key() << ": " << bwd_weights;
  }
}

}  // namespace
}  // namespace packrat
