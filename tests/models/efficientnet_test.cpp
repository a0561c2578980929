// EfficientNet-B0 / EfficientNetV2-S against torchvision: state_dict keys and shapes of the full
// models, the blocks (squeeze-excitation, MBConv, Fused-MBConv, drop path in eval) and a
// width/depth-scaled model of each, forward and backward in eval and train mode, with the
// weights read from safetensors files torchvision's code wrote (tests/golden/make_efficientnet_goldens.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "experiments/lib/config.h"
#include "experiments/lib/safetensors.h"
#include "models/efficientnet.h"
#include "models/registry.h"
#include "tests/models/golden_file.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

const SafetensorsFile& golden_file(const std::string& name) {
  static std::map<std::string, SafetensorsFile> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, read_safetensors(golden_path(name), MemTag::Data)).first;
  return it->second;
}

const Tensor& golden(const SafetensorsFile& f, const std::string& key) {
  const Tensor* t = f.find(key);
  if (!t) throw std::runtime_error("golden key missing: " + key);
  return *t;
}

// Copies `prefix`param.<name> and `prefix`buffer.<name> into the module (every one must exist).
void load_weights(Module& m, const SafetensorsFile& f, const std::string& prefix) {
  for (auto& [name, p] : m.named_parameters()) {
    const Tensor& g = golden(f, prefix + "param." + name);
    ASSERT_EQ(g.shape(), p.shape()) << name;
    std::memcpy(p.raw(), g.raw(), p.nbytes());
  }
  for (auto& [name, b] : m.named_buffers()) {
    if (b.dtype() != DType::f32) continue;
    const Tensor& g = golden(f, prefix + "buffer." + name);
    ASSERT_EQ(g.shape(), b.shape()) << name;
    std::memcpy(b.raw(), g.raw(), b.nbytes());
  }
}

// Forward + backward of x with output gradient gy; compares y, dx and every parameter gradient
// to `prefix`y, `prefix`gx, `prefix`grad.<name>.
void check_forward_backward(Module& m, const SafetensorsFile& f, const Tensor& x0, const Tensor& gy,
                            const std::string& prefix, float atol, float rtol) {
  m.zero_grad();
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  Tensor y = m(x);
  ASSERT_EQ(y.shape(), golden(f, prefix + "y").shape());
  expect_close(y.to_vector(), golden(f, prefix + "y").to_vector(), atol, rtol, prefix + "y");
  backward(y, gy.to_layout(y.layout()));
  expect_close(x.grad().to_vector(), golden(f, prefix + "gx").to_vector(), atol, rtol, prefix + "gx");
  for (auto& [name, p] : m.named_parameters())
    expect_close(p.grad().to_vector(), golden(f, prefix + "grad." + name).to_vector(), atol, rtol, prefix + "grad." + name);
}

void check_block(Module& block, const std::string& key, bool train) {
  const SafetensorsFile& f = golden_file("efficientnet_blocks.safetensors");
  load_weights(block, f, key + ".");
  block.train(train);
  check_forward_backward(block, f, golden(f, key + ".x"), golden(f, key + ".gy"), key + ".", 1e-4f, 1e-3f);
  for (auto& [name, b] : block.named_buffers())
    if (b.dtype() == DType::f32)
      expect_close(b.to_vector(), golden(f, key + ".after." + name).to_vector(), 1e-5f, 1e-4f, key + " " + name);
}

ModelSpec spec(const std::string& arch, int64_t classes = 10) {
  ModelSpec s;
  s.arch = arch;
  s.num_classes = classes;
  s.seed = 1;
  return s;
}

}  // namespace

class EfficientNetKeys : public ::testing::TestWithParam<std::string> {};

// A state dict saved by packrat has torchvision's names, order and shapes: it loads into
// torchvision's model with strict=True, and torchvision's loads here.
TEST_P(EfficientNetKeys, ParameterAndBufferNamesAndShapesEqualTorchvision) {
  const std::string arch = GetParam();
  auto model = make_model(spec(arch));
  expect_torchvision_keys(*model, arch + ".txt");
}

INSTANTIATE_TEST_SUITE_P(Torchvision, EfficientNetKeys, ::testing::Values("efficientnet_b0", "efficientnet_v2_s"));

TEST(EfficientNetRegistry, ParameterCountsAreTorchvisions) {
  EXPECT_EQ(make_model(spec("efficientnet_b0", 1000))->num_parameters(), 5288548);
  EXPECT_EQ(make_model(spec("efficientnet_b0"))->num_parameters(), 4020358);
  EXPECT_EQ(make_model(spec("efficientnet_v2_s", 1000))->num_parameters(), 21458488);
  EXPECT_EQ(make_model(spec("efficientnet_v2_s"))->num_parameters(), 20190298);
  // The small presets: torchvision's EfficientNet code with the same rows at width 0.5 and depth
  // 0.5 (B0) / 0.25 (V2) has these counts; the config's multipliers shrink them further.
  const int64_t b0_small = make_model(spec("efficientnet_b0_small"))->num_parameters();
  EXPECT_EQ(b0_small, 663530);
  EXPECT_EQ(make_model(spec("efficientnet_v2_small"))->num_parameters(), 1363726);
  ModelSpec narrower = spec("efficientnet_b0_small");
  narrower.width_mult = 0.5;
  EXPECT_LT(make_model(narrower)->num_parameters(), b0_small / 2);
}

TEST(EfficientNetRegistry, TorchvisionConventions) {
  auto m = make_model(spec("efficientnet_v2_s"));
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : m->named_parameters()) p[n] = t;
  // SE of the first MBConv (features.4.0: 64 -> 256 expanded, squeeze 64 / 4 = 16): zero biases.
  EXPECT_EQ(p["features.4.0.block.2.fc1.weight"].shape(), (Shape{16, 256, 1, 1}));
  for (float v : p["features.4.0.block.2.fc1.bias"].to_vector()) EXPECT_EQ(v, 0.0f);
  // classifier.1: U(-1/sqrt(10), 1/sqrt(10)), zero bias.
  for (float v : p["classifier.1.weight"].to_vector()) EXPECT_LE(std::abs(v), 1.0f / std::sqrt(10.0f));
  for (float v : p["classifier.1.bias"].to_vector()) EXPECT_EQ(v, 0.0f);
  // The stem: 3x3 stride 2 (imagenet) halves 64x64; the cifar stem keeps the size.
  {
    NoGradScope ng;
    m->eval();
    EXPECT_EQ((*m)(Tensor::zeros({1, 3, 64, 64})).shape(), (Shape{1, 10}));
  }
}

TEST(EfficientNetRegistry, UnknownPresetListsTheKnownOnes) {
  try {
    make_model(spec("efficientnet_b9"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* want : {"efficientnet_b9", "efficientnet_b0", "efficientnet_v2_s", "efficientnet_b0_small",
                             "efficientnet_v2_small"})
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
  ModelSpec bad = spec("efficientnet_b0_small");
  bad.stem = "tiny";
  EXPECT_THROW(make_model(bad), Error);
  ModelSpec scaled_resnet = spec("resnet20");
  scaled_resnet.width_mult = 0.5;
  EXPECT_THROW(make_model(scaled_resnet), Error);  // the multipliers are the EfficientNets' only
  EXPECT_EQ(default_activation("efficientnet_b0"), "silu");
  EXPECT_EQ(default_activation("resnet18"), "relu");
}

// A config naming an unknown preset fails at parse time, naming the key and its line; the
// multipliers are read and range-checked; the activation defaults to the architecture's own.
TEST(EfficientNetConfig, UnknownPresetNamesTheKeyAndTheMultipliersAreChecked) {
  const std::string base = "data: {dataset: fashion_mnist}\nmodel:\n  arch: ";
  try {
    parse_config(base + "efficientnet_b9\n", "e.yaml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.arch (line 3)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("efficientnet_b9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("efficientnet_v2_small"), std::string::npos) << msg;
  }
  const Config c = parse_config(base + "efficientnet_b0_small\n  width_mult: 0.75\n  depth_mult: 2\n", "e.yaml");
  EXPECT_EQ(c.model.width_mult, 0.75);
  EXPECT_EQ(c.model.depth_mult, 2.0);
  EXPECT_EQ(c.model.activation, "silu");
  EXPECT_EQ(parse_config(base + "resnet20\n", "e.yaml").model.activation, "relu");
  EXPECT_THROW(parse_config(base + "efficientnet_b0\n  width_mult: 0\n", "e.yaml"), Error);
}

// Stochastic depth rises linearly over the blocks: torchvision's p * block / total (B0: 16 blocks).
TEST(EfficientNetRegistry, StochasticDepthRisesLinearlyOverTheBlocks) {
  EfficientNetConfig c = efficientnet_b0_config();
  c.num_classes = 10;
  EfficientNet m(c);
  std::vector<float> probs;
  for (size_t stage = 1; stage <= 7; ++stage) {
    const auto& seq = dynamic_cast<const Sequential&>(*m.features()[stage]);
    for (size_t b = 0; b < seq.size(); ++b) probs.push_back(dynamic_cast<const MBConv&>(*seq[b]).stochastic_depth().p());
  }
  ASSERT_EQ(probs.size(), 16u);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_FLOAT_EQ(probs[i], 0.2f * static_cast<float>(i) / 16.0f) << i;
}

TEST(EfficientNetBlock, SqueezeExcitationMatchesTorchvision) {
  init::SeedSequence seeds(0);
  SqueezeExcitation se(16, 4, "silu", seeds);
  check_block(se, "se", true);
}

TEST(EfficientNetBlock, MBConvResidualMatchesTorchvision) {
  init::SeedSequence seeds(0);
  MBConv block({false, 4, 3, 1, 8, 8}, 0.0f, BnSettings{1e-5f, 0.1f}, "silu", seeds);
  check_block(block, "mbconv", true);
}

TEST(EfficientNetBlock, MBConvStride2Kernel5MatchesTorchvision) {
  init::SeedSequence seeds(0);
  MBConv block({false, 6, 5, 2, 8, 16}, 0.0f, BnSettings{1e-5f, 0.1f}, "silu", seeds);
  check_block(block, "mbconv_s2", true);
}

TEST(EfficientNetBlock, FusedMBConvMatchesTorchvision) {
  init::SeedSequence seeds(0);
  FusedMBConv block({true, 4, 3, 2, 8, 16}, 0.0f, BnSettings{1e-3f, 0.1f}, "silu", seeds);
  check_block(block, "fused", true);
}

TEST(EfficientNetBlock, FusedMBConvExpandOneResidualMatchesTorchvision) {
  init::SeedSequence seeds(0);
  FusedMBConv block({true, 1, 3, 1, 8, 8}, 0.0f, BnSettings{1e-3f, 0.1f}, "silu", seeds);
  check_block(block, "fused_res", true);
}

TEST(EfficientNetBlock, DropPathInEvalIsIdentityAsTorchvisions) {
  init::SeedSequence seeds(0);
  MBConv block({false, 4, 3, 1, 8, 8}, 0.5f, BnSettings{1e-5f, 0.1f}, "silu", seeds);
  check_block(block, "mbconv_eval", false);
}

class EfficientNetGolden : public ::testing::TestWithParam<std::string> {};

// torchvision's EfficientNet code at width 0.1, depth 0.1 on (3, 3, 48, 48): eval mode with the
// model's own dropout and stochastic depth (identity), then train mode with both 0 (torch's
// random draws cannot be shared), running statistics after it.
TEST_P(EfficientNetGolden, TinyModelForwardBackwardEvalAndTrainMatchTorchvision) {
  const std::string arch = GetParam();
  const SafetensorsFile& f = golden_file(arch + "_tiny.safetensors");
  EfficientNetConfig c = arch == "efficientnet_b0" ? efficientnet_b0_config() : efficientnet_v2_s_config();
  c.width_mult = c.depth_mult = 0.1;
  c.num_classes = 10;
  EfficientNet eval_model(c);
  load_weights(eval_model, f, "");
  eval_model.eval();
  check_forward_backward(eval_model, f, golden(f, "x"), golden(f, "gy"), "eval.", 2e-4f, 2e-3f);

  c.dropout = c.stochastic_depth_prob = 0.0f;
  EfficientNet train_model(c);
  load_weights(train_model, f, "");
  check_forward_backward(train_model, f, golden(f, "x"), golden(f, "gy"), "train.", 2e-4f, 2e-3f);
  for (auto& [name, b] : train_model.named_buffers())
    if (b.dtype() == DType::f32)
      expect_close(b.to_vector(), golden(f, "train.buffer." + name).to_vector(), 1e-5f, 1e-4f, name);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, EfficientNetGolden, ::testing::Values("efficientnet_b0", "efficientnet_v2_s"));
