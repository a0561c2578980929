#include <gtest/gtest.h>

#include <cmath>

#include "autograd/tape.h"
#include "layers/activation.h"
#include "layers/batchnorm2d.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/flatten.h"
#include "layers/init.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/pooling.h"
#include "layers/sequential.h"
#include "tests/models/golden_file.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST(LayerInit, Conv2dHasPyTorchNamesShapesAndDefaultInitBound) {
  ConvConfig c;
  c.stride = 2;
  c.padding = 1;
  Conv2d conv(3, 8, 3, c, 42);
  EXPECT_EQ(names_of(conv.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(conv.bias().shape(), (Shape{8}));
  EXPECT_EQ(conv.num_parameters(), 8 * 27 + 8);
  EXPECT_TRUE(conv.weight().requires_grad());
  EXPECT_EQ(conv.weight().storage()->allocation->tag(), MemTag::Parameter);
  const float bound = 1.0f / std::sqrt(27.0f);
  float maxabs = 0;
  for (float v : conv.weight().to_vector()) maxabs = std::max(maxabs, std::abs(v));
  EXPECT_LE(maxabs, bound);
  EXPECT_GT(maxabs, 0.8f * bound);  // 216 uniform draws reach near the bound
  Conv2d nobias(3, 8, 3, ConvConfig{.bias = false}, 42);
  EXPECT_EQ(names_of(nobias.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(nobias.bias().defined());
}

TEST(LayerInit, SameSeedSameWeightsOtherSeedOtherWeights) {
  Linear a(16, 4, true, 7), b(16, 4, true, 7), c(16, 4, true, 8);
  EXPECT_TRUE(bitwise_equal(a.weight(), b.weight()));
  EXPECT_TRUE(bitwise_equal(a.bias(), b.bias()));
  EXPECT_FALSE(bitwise_equal(a.weight(), c.weight()));
  Embedding e1(10, 4, 3), e2(10, 4, 3);
  EXPECT_TRUE(bitwise_equal(e1.weight(), e2.weight()));
}

TEST(LayerInit, KaimingNormalFanOutHasTheRightSpread) {
  TagScope tag(MemTag::Parameter);
  Tensor w = Tensor::empty({64, 32, 3, 3});
  PhiloxStream rng(1, 2);
  init::kaiming_normal_fan_out(w, rng);
  double s = 0, s2 = 0;
  for (float v : w.to_vector()) s += v, s2 += double(v) * v;
  const double n = double(w.numel()), mean = s / n, var = s2 / n - mean * mean;
  const double want = 2.0 / (64 * 9);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, want, 0.05 * want);
  EXPECT_EQ(init::fan_in(w.shape()), 32 * 9);
  EXPECT_EQ(init::fan_out(w.shape()), 64 * 9);
}

// A weight kept in another layout (a GPU's KRSC convolution weight; here the CPU's blocked
// nChw16c) takes, element for element, the values its plain twin draws, and leaves the stream
// where the plain fill leaves it.
TEST(LayerInit, FillsDrawInLogicalOrderWhateverTheLayout) {
  TagScope tag(MemTag::Parameter);
  Tensor plain = Tensor::empty({32, 16, 3, 3});
  Tensor blocked = Tensor::empty({32, 16, 3, 3}, DType::f32, Layout::nChw16c);
  for (int fill = 0; fill < 2; ++fill) {
    PhiloxStream a(4, 5), b(4, 5);
    if (fill == 0) {
      init::normal(plain, 0.5f, 2.0f, a);
      init::normal(blocked, 0.5f, 2.0f, b);
    } else {
      init::uniform(plain, -1.0f, 3.0f, a);
      init::uniform(blocked, -1.0f, 3.0f, b);
    }
    EXPECT_EQ(blocked.layout(), Layout::nChw16c);
    EXPECT_EQ(blocked.to_vector(), plain.to_vector()) << (fill == 0 ? "normal" : "uniform");
    EXPECT_EQ(a.state(), b.state());
  }
}

TEST(LayerNames, BatchNormHasPyTorchParametersAndBuffers) {
  BatchNorm2d bn(16);
  EXPECT_EQ(names_of(bn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names_of(bn.named_buffers()),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  for (float v : bn.weight().to_vector()) EXPECT_EQ(v, 1.0f);
  for (float v : bn.bias().to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : bn.running_var().to_vector()) EXPECT_EQ(v, 1.0f);
  auto buffers = bn.named_buffers();
  EXPECT_EQ(buffers[2].second.dtype(), DType::i64);
  EXPECT_EQ(buffers[2].second.rank(), 0);
  EXPECT_EQ(bn.num_batches_tracked(), 0);
  EXPECT_FALSE(buffers[0].second.requires_grad());
  LayerNorm ln(8);
  EXPECT_EQ(names_of(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
}

TEST(LayerNames, SequentialNamesChildrenByIndex) {
  Sequential s;
  s.add(std::make_shared<Conv2d>(3, 4, 3, ConvConfig{}, 1));
  s.add(std::make_shared<BatchNorm2d>(4));
  s.add(std::make_shared<Activation>("gelu"));
  auto inner = s.add(std::make_shared<Sequential>());
  inner->add(std::make_shared<Linear>(4, 2, true, 2));
  EXPECT_EQ(names_of(s.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "3.0.weight", "3.0.bias"}));
  EXPECT_EQ(names_of(s.named_buffers()),
            (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(s.size(), 4u);
}

TEST(LayerErrors, UnknownActivationAndBadConfigsThrow) {
  EXPECT_THROW(Activation("nope"), Error);
  EXPECT_THROW(Conv2d(3, 4, 3, ConvConfig{.groups = 2}, 0), Error);
  EXPECT_THROW(Dropout(1.0f), Error);
  EXPECT_THROW(MaxPool2d(2, 2, 2), Error);
}

TEST(LayerErrors, WrongInputChannelsNameTheNestedLayer) {
  Sequential s;
  s.add(std::make_shared<Conv2d>(3, 4, 3, ConvConfig{.padding = 1}, 1));
  auto inner = s.add(std::make_shared<Sequential>());
  inner->add(std::make_shared<Conv2d>(5, 6, 3, ConvConfig{.padding = 1}, 2));
  Tensor x = random_tensor({1, 3, 5, 5}, 3);
  try {
    s(x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d 1.0: input has 4 channels, weight expects 5"), std::string::npos)
        << e.what();
  }
  clear_tape();  // the first conv recorded a node
  Linear lin(8, 2, true, 1);
  try {
    lin(random_tensor({2, 7}, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("7 features"), std::string::npos) << e.what();
  }
}

TEST(LayerGolden, LinearMatchesPyTorch) {
  auto g = read_golden_values("layers.txt");
  Linear lin(5, 4, true, 0);
  std::memcpy(lin.weight().raw(), golden_at(g, "linear.weight").data(), lin.weight().nbytes());
  std::memcpy(lin.bias().raw(), golden_at(g, "linear.bias").data(), lin.bias().nbytes());
  Tensor x = golden_tensor(g, "linear.x", {3, 5});
  x.set_requires_grad(true);
  Tensor y = lin(x);
  expect_close(y.to_vector(), golden_at(g, "linear.y"), 1e-5f, 1e-5f, "y");
  backward(y, golden_tensor(g, "linear.gy", {3, 4}));
  expect_close(x.grad().to_vector(), golden_at(g, "linear.gx"), 1e-5f, 1e-5f, "grad x");
  expect_close(lin.weight().grad().to_vector(), golden_at(g, "linear.gweight"), 1e-5f, 1e-5f, "grad weight");
  expect_close(lin.bias().grad().to_vector(), golden_at(g, "linear.gbias"), 1e-5f, 1e-5f, "grad bias");
}

TEST(LayerGolden, Conv2dMatchesPyTorch) {
  auto g = read_golden_values("layers.txt");
  Conv2d conv(3, 4, 3, ConvConfig{.stride = 2, .padding = 1}, 0);
  std::memcpy(conv.weight().raw(), golden_at(g, "conv.weight").data(), conv.weight().nbytes());
  std::memcpy(conv.bias().raw(), golden_at(g, "conv.bias").data(), conv.bias().nbytes());
  Tensor x = golden_tensor(g, "conv.x", {2, 3, 6, 6});
  x.set_requires_grad(true);
  Tensor y = conv(x);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3, 3}));
  expect_close(y.to_vector(), golden_at(g, "conv.y"), 1e-4f, 1e-4f, "y");
  backward(y, golden_tensor(g, "conv.gy", {2, 4, 3, 3}).to_layout(y.layout()));
  expect_close(x.grad().to_vector(), golden_at(g, "conv.gx"), 1e-4f, 1e-4f, "grad x");
  expect_close(conv.weight().grad().to_vector(), golden_at(g, "conv.gweight"), 1e-4f, 1e-4f, "grad weight");
  expect_close(conv.bias().grad().to_vector(), golden_at(g, "conv.gbias"), 1e-4f, 1e-4f, "grad bias");
}

TEST(LayerForward, BatchNormCountsBatchesInTrainingOnly) {
  BatchNorm2d bn(4);
  Tensor x = random_tensor({2, 4, 3, 3}, 5);
  bn(x);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked(), 2);
  bn.eval();
  {
    NoGradScope ng;
    Tensor y = bn(x);
    EXPECT_EQ(y.shape(), x.shape());
  }
  EXPECT_EQ(bn.num_batches_tracked(), 2);
  clear_tape();
}

TEST(LayerForward, PoolingFlattenAndActivationShapes) {
  NoGradScope ng;
  Tensor x = random_tensor({2, 3, 8, 8}, 6);
  EXPECT_EQ(MaxPool2d(3, 2, 1)(x).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(AvgPool2d(2)(x).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(AdaptiveAvgPool2d(1, 1)(x).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(Flatten()(x).shape(), (Shape{2, 192}));
  Tensor y = Activation("relu")(x);
  auto xv = x.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(yv[i], std::max(xv[i], 0.0f));
}

TEST(LayerForward, DropoutIsReproducibleAndIdentityInEval) {
  NoGradScope ng;
  set_dropout_seed(123);
  Dropout d(0.5f);
  Tensor x = Tensor::full({4, 64}, 1.0f);
  d.set_calls(0);
  auto a = d(x).to_vector();
  d.set_calls(0);
  auto b = d(x).to_vector();
  auto c = d(x).to_vector();  // next call: another mask
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int zeros = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 64);
  EXPECT_LT(zeros, 192);
  d.eval();
  EXPECT_EQ(d(x).to_vector(), x.to_vector());
}

TEST(LayerForward, LayerNormAndEmbeddingRunThroughTheirOps) {
  NoGradScope ng;
  LayerNorm ln(6);
  auto y = ln(random_tensor({3, 6}, 8)).to_vector();
  for (int r = 0; r < 3; ++r) {  // weight 1, bias 0: each row has mean 0, variance 1
    double s = 0, s2 = 0;
    for (int k = 0; k < 6; ++k) s += y[r * 6 + k], s2 += double(y[r * 6 + k]) * y[r * 6 + k];
    EXPECT_NEAR(s / 6, 0.0, 1e-5);
    EXPECT_NEAR(s2 / 6, 1.0, 1e-3);
  }
  Embedding emb(10, 4, 9);
  Tensor ids = Tensor::empty({2}, DType::i64);
  ids.data<int64_t>()[0] = 7;
  ids.data<int64_t>()[1] = 2;
  auto e = emb(ids).to_vector();
  auto w = emb.weight().to_vector();
  ASSERT_EQ(e.size(), 8u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(e[k], w[7 * 4 + k]);
    EXPECT_EQ(e[4 + k], w[2 * 4 + k]);
  }
  EXPECT_THROW(emb(random_tensor({2}, 1)), Error);  // f32 ids
}
