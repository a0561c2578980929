// The Vision Transformer against torchvision's VisionTransformer: state_dict names and shapes
// (vit_b_16), and forward + backward of a small one with exchanged weights, in train and eval
// mode (tests/golden/transformer, made by tests/golden/make_transformer_goldens.py).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/tape.h"
#include "models/registry.h"
#include "models/vit.h"
#include "tests/models/vit_fixture.h"
#include "tests/autograd/elementwise_golden.h"

using namespace packrat;
using packrat::testing::expect_close;
using packrat::testing::load_golden;

namespace {

VitConfig small_config() { return packrat::testing::small_vit_config(); }

bool is_data_key(const std::string& k) {
  return k == "x" || k == "gy" || k.rfind("train.", 0) == 0 || k.rfind("eval.", 0) == 0;
}

}  // namespace

TEST(VisionTransformer, VitB16StateDictMatchesTorchvisionNamesAndShapes) {
  auto m = make_model(ModelSpec{"vit_b_16", "", "", 3, 1000, 0});
  std::ifstream in(std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/transformer/vit_b_16_keys.txt");
  ASSERT_TRUE(in.good());
  std::vector<std::pair<std::string, Shape>> want;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string kind, name;
    s >> kind >> name;
    std::vector<int64_t> dims;
    for (int64_t d; s >> d;) dims.push_back(d);
    want.emplace_back(name, Shape(dims));
  }
  const auto got = m->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(m->named_buffers().empty());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.shape(), want[i].second) << got[i].first;
  }
  EXPECT_EQ(m->num_parameters(), 86567656);  // torchvision's vit_b_16
}

TEST(VisionTransformer, ForwardAndBackwardMatchTorchvisionInTrainAndEval) {
  const auto g = load_golden("vit.txt", "transformer");
  VisionTransformer m(small_config());
  size_t loaded = 0;
  for (auto& [name, t] : m.named_parameters()) {
    const auto& w = g.at(name);
    ASSERT_EQ(t.shape(), w.shape) << name;
    const Tensor src = w.f32();
    std::memcpy(t.data<float>(), src.data<float>(), static_cast<size_t>(t.nbytes()));
    ++loaded;
  }
  size_t golden_params = 0;
  for (const auto& [k, v] : g) golden_params += is_data_key(k) ? 0 : 1;
  EXPECT_EQ(loaded, golden_params);  // strict: every torchvision entry, nothing more
  for (const char* mode : {"train", "eval"}) {
    SCOPED_TRACE(mode);
    m.train(std::string(mode) == "train");
    m.zero_grad();
    Tensor x = g.at("x").f32().set_requires_grad(true);
    Tensor y = m(x);
    expect_close(y, g.at(std::string(mode) + ".y"), 1e-5, 1e-4, "y");
    backward(y, g.at("gy").f32());
    expect_close(x.grad(), g.at(std::string(mode) + ".gx"), 1e-5, 1e-4, "gx");
    for (auto& [name, p] : m.named_parameters())
      expect_close(p.grad(), g.at(std::string(mode) + ".grad." + name), 1e-5, 1e-4, name);
  }
}

TEST(VisionTransformer, SavedTensorsAreNamedByBlock) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  VisionTransformer m(small_config());
  Tensor y = m(Tensor::zeros({2, 3, 8, 8}));
  std::map<std::string, int> per_op;
  bool attention_in_block = false;
  for (const auto& r : policy.describe()) {
    EXPECT_FALSE(r.layer.empty()) << r.op;
    per_op[r.op]++;
    if (r.op == "attention_softmax")
      attention_in_block = attention_in_block ||
                           r.layer == "encoder.layers.encoder_layer_1.self_attention";
  }
  EXPECT_TRUE(attention_in_block);
  EXPECT_EQ(per_op["attention_softmax"], 2);
  EXPECT_EQ(per_op["gelu"], 2);
  EXPECT_EQ(per_op["layernorm"], 2 * 2 * 3 + 3);  // ln_1, ln_2 per block + encoder.ln: x, mean, rstd
  backward(y, Tensor::full(y.shape(), 1.0f));
  EXPECT_EQ(policy.describe().size(), 0u);
}

TEST(VisionTransformer, PresetsAndBadSizesFailNamingTheKey) {
  auto tiny = make_model(ModelSpec{"vit_tiny_fmnist", "", "", 1, 10, 0});
  Tensor y;
  {
    NoGradScope ng;
    y = (*tiny)(Tensor::zeros({2, 1, 28, 28}));
  }
  EXPECT_EQ(y.shape(), Shape({2, 10}));
  try {
    ModelSpec s{"vit_tiny_cifar", "", "", 3, 10, 0};
    s.image_size = 30;
    make_model(s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.image_size 30 is not divisible by model.patch_size 4"),
              std::string::npos)
        << e.what();
  }
  try {
    make_model(ModelSpec{"vit_nonexistent", "", "", 3, 10, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vit_tiny_fmnist"), std::string::npos) << e.what();
  }
}
