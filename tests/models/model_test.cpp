#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "autograd/saved_tensor_store.h"

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "tests/models/golden_file.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

ModelSpec spec(const std::string& arch, const std::string& stem = "", const std::string& act = "relu",
               int64_t in = 3, int64_t classes = 10, uint64_t seed = 1) {
  return ModelSpec{arch, stem, act, in, classes, seed};
}

Tensor data_tensor(const Shape& shape, uint64_t seed) {
  TagScope tag(MemTag::Data);
  return random_tensor(shape, seed);
}

Tensor labels(std::vector<int64_t> v) {
  TagScope tag(MemTag::Data);
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

}  // namespace

class ModelKeys : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(ModelKeys, ParameterAndBufferNamesAndShapesEqualTorchvision) {
  const auto [arch, stem] = GetParam();
  auto model = make_model(spec(arch, stem));
  expect_torchvision_keys(*model, arch + "_" + stem + ".txt");
}

INSTANTIATE_TEST_SUITE_P(Torchvision, ModelKeys,
                         ::testing::Values(std::pair{"resnet18", "imagenet"}, std::pair{"resnet18", "cifar"},
                                           std::pair{"resnet34", "imagenet"}, std::pair{"resnet34", "cifar"},
                                           std::pair{"resnet50", "imagenet"}, std::pair{"resnet50", "cifar"}),
                         [](const auto& info) { return info.param.first + "_" + info.param.second; });

TEST(ModelRegistry, ParameterCounts) {
  EXPECT_EQ(make_model(spec("resnet20"))->num_parameters(), 269722);  // He et al.: 0.27M
  EXPECT_EQ(make_model(spec("resnet32"))->num_parameters(), 464154);  // 0.46M
  EXPECT_EQ(make_model(spec("resnet56"))->num_parameters(), 853018);  // 0.85M
  EXPECT_EQ(make_model(spec("resnet18", "imagenet"))->num_parameters(), 11181642);  // torchvision, 10 classes
  EXPECT_EQ(make_model(spec("resnet50", "imagenet"))->num_parameters(), 23528522);
  // One input channel (Fashion-MNIST) changes only conv1: 64 * 7 * 7 * 2 fewer weights.
  EXPECT_EQ(make_model(spec("resnet18", "imagenet", "relu", 1))->num_parameters(), 11181642 - 64 * 49 * 2);
}

TEST(ModelRegistry, UnknownArchListsTheKnownOnes) {
  try {
    make_model(spec("resnet19"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("resnet19"), std::string::npos) << m;
    for (const char* known : {"resnet18", "resnet34", "resnet50", "resnet20", "resnet32", "resnet56"})
      EXPECT_NE(m.find(known), std::string::npos) << m;
  }
  EXPECT_THROW(make_model(spec("resnet18", "tiny")), Error);
  EXPECT_THROW(make_model(spec("resnet20", "imagenet")), Error);
  EXPECT_THROW(make_model(spec("resnet20", "cifar", "nope")), Error);
}

TEST(ModelRegistry, SameSeedSameModelOtherSeedOtherModel) {
  auto a = make_model(spec("resnet20", "", "relu", 3, 10, 5));
  auto b = make_model(spec("resnet20", "", "relu", 3, 10, 5));
  auto c = make_model(spec("resnet20", "", "relu", 3, 10, 6));
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  bool all_same_c = true;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].second.to_vector(), pb[i].second.to_vector()) << pa[i].first;
    all_same_c = all_same_c && pa[i].second.to_vector() == pc[i].second.to_vector();
  }
  EXPECT_FALSE(all_same_c);
  // Convs of one model do not repeat each other's draws.
  EXPECT_NE(pa[3].second.to_vector(), pa[6].second.to_vector());  // layer1.0.conv1 vs layer1.0.conv2
}

TEST(ModelRegistry, TorchvisionInitConvention) {
  auto m = make_model(spec("resnet18", "imagenet"));
  for (const auto& [name, t] : m->named_parameters()) {
    if (name == "layer1.0.conv1.weight") {  // kaiming normal fan_out: std sqrt(2 / (64 * 9))
      double s2 = 0;
      for (float v : t.to_vector()) s2 += double(v) * v;
      EXPECT_NEAR(std::sqrt(s2 / t.numel()), std::sqrt(2.0 / (64 * 9)), 0.003);
    }
    if (name == "layer1.0.bn1.weight") {
      for (float v : t.to_vector()) EXPECT_EQ(v, 1.0f);
    }
    if (name == "fc.weight") {  // nn.Linear default: |w| <= 1/sqrt(512)
      for (float v : t.to_vector()) EXPECT_LE(std::abs(v), 1.0f / std::sqrt(512.0f));
    }
  }
}

TEST(ModelErrors, WrongInputChannelsNameTheLayer) {
  auto m = make_model(spec("resnet18", "cifar"));
  try {
    m->operator()(data_tensor({1, 1, 8, 8}, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d conv1: input has 1 channels, weight expects 3"), std::string::npos)
        << e.what();
  }
  clear_tape();
}

namespace {

// Forward + cross-entropy + backward; every parameter must get a finite, not all-zero gradient.
void expect_all_gradients(Module& m, const Tensor& x, const Tensor& y) {
  m.zero_grad();
  {
    Tensor logits = m(x);
    ASSERT_EQ(logits.shape(), (Shape{x.dim(0), 10}));
    Tensor loss = ops::cross_entropy(logits, y);
    EXPECT_TRUE(std::isfinite(loss.item()));
    backward(loss);
  }
  for (const auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
    double s = 0;
    for (float v : p.grad().to_vector()) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      s += std::abs(v);
    }
    EXPECT_GT(s, 0.0) << name;
  }
  m.zero_grad();
}

}  // namespace

TEST(ModelTrain, ResNet20GivesEveryParameterAGradient) {
  auto m = make_model(spec("resnet20"));
  expect_all_gradients(*m, data_tensor({4, 3, 8, 8}, 2), labels({0, 3, 5, 9}));
}

TEST(ModelTrain, ResNet18GeluOneChannelImagenetStemGivesEveryParameterAGradient) {
  auto m = make_model(spec("resnet18", "imagenet", "gelu", 1));
  expect_all_gradients(*m, data_tensor({2, 1, 32, 32}, 3), labels({1, 7}));
}

TEST(ModelTrain, ResNet50CifarStemSiluGivesEveryParameterAGradient) {
  auto m = make_model(spec("resnet50", "cifar", "silu"));
  expect_all_gradients(*m, data_tensor({2, 3, 8, 8}, 4), labels({2, 4}));
}

TEST(ModelTrain, ResNet20StepLeavesNoActivationOrSavedBytes) {
  auto& a = Allocator::cpu();
  // Relative to the start, so that bytes another suite may still hold do not count here.
  const int64_t activation0 = a.current(MemTag::Activation), saved0 = a.current(MemTag::Saved);
  auto m = make_model(spec("resnet20"));
  SGD opt(m->named_parameters(), SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
  Tensor x = data_tensor({8, 3, 16, 16}, 5);
  Tensor y = labels({0, 1, 2, 3, 4, 5, 6, 7});
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < 3; ++step) {
    {
      Tensor loss = ops::cross_entropy((*m)(x), y);
      (step == 0 ? first_loss : last_loss) = loss.item();
      EXPECT_GT(a.current(MemTag::Saved), saved0);
      backward(loss);
    }
    opt.step();
    opt.zero_grad();
    EXPECT_EQ(a.current(MemTag::Activation), activation0) << "step " << step;
    EXPECT_EQ(a.current(MemTag::Saved), saved0) << "step " << step;
    EXPECT_EQ(tape_size(), 0u);
  }
  EXPECT_GT(a.current(MemTag::OptimizerState), 0);
  EXPECT_LT(last_loss, first_loss);  // three steps on one batch fit it a little
}

TEST(ModelTrain, EvalModeIsDeterministicAndLeavesRunningStats) {
  auto m = make_model(spec("resnet20"));
  Tensor x = data_tensor({2, 3, 8, 8}, 6);
  m->eval();
  NoGradScope ng;
  auto before = m->named_buffers();
  std::vector<std::vector<float>> saved;
  for (auto& [n, t] : before)
    if (t.dtype() == DType::f32) saved.push_back(t.to_vector());
  auto a = (*m)(x).to_vector();
  auto b = (*m)(x).to_vector();
  EXPECT_EQ(a, b);
  size_t k = 0;
  for (auto& [n, t] : m->named_buffers())
    if (t.dtype() == DType::f32) {
      EXPECT_EQ(t.to_vector(), saved[k++]) << n;
    }
}

TEST(ModelTrain, SavedTensorsCarryDottedLayerNames) {
  auto m = make_model(spec("resnet20", "", "gelu"));
  Tensor x = data_tensor({2, 3, 8, 8}, 7);
  Tensor logits = (*m)(x);
  std::set<std::string> seen;
  for (const auto& r : current_policy().describe()) seen.insert(std::string(r.op) + " " + r.layer);
  clear_tape();
  for (const char* want : {"conv2d conv1", "gelu act", "conv2d layer1.0.conv1", "batchnorm2d layer1.0.bn1",
                           "gelu layer1.0.act1", "conv2d layer3.2.conv2", "gelu layer3.2.act2", "linear fc"})
    EXPECT_TRUE(seen.count(want)) << "no saved tensor named '" << want << "'";
}
