// The fp8 store (quant/fp8/fp8_store.h), registered as scheme "fp8": the bytes the allocator counts
// under Saved (numel code bytes + 4 bytes a scale), its loads (the codec's round trip, f' of it for
// derivatives, exact 1-bit masks for the relu family), its options and their errors, and models
// that train with it: one training step of a ResNet (convolutions, batchnorm, relu; the CPU's
// blocked layouts) and of a small ViT (linear, layernorm, GELU, attention) with every saved tensor in
// fp8 gives parameter gradients close to FP32's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "data/idx.h"
#include "models/registry.h"
#include "models/vit.h"
#include "quant/fp8/fp8_store.h"
#include "quant/policy/rule_policy.h"
#include "tests/models/vit_fixture.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::message_of;
using testing::random_tensor;
using Options = std::map<std::string, std::string>;

int64_t saved_bytes() { return Allocator::cpu().current(MemTag::Saved); }

std::unique_ptr<SavedTensorStore> fp8(Options o) { return make_store({"fp8", std::move(o), "saved_tensors.default (line 3)"}, 0); }

TEST(Fp8Store, SavedBytesAreTheCodesAndScalesAsTheAllocatorCountsThem) {
  const Tensor x = random_tensor({4, 3, 9, 11}, 1, -3.0f, 3.0f);  // 1188 elements
  struct Case {
    Options options;
    int64_t scales;
  };
  for (const Case& c : {Case{{}, 10},  // groups of 128: 9 full, one of 36
                        Case{{{"group_size", "7"}}, 170},
                        Case{{{"format", "e5m2"}, {"scale", "per_tensor"}}, 1},
                        Case{{{"format", "e5m2"}, {"group_size", "1188"}}, 1}}) {
    const auto store = fp8(c.options);
    ASSERT_EQ(store->scheme(), "fp8");
    const int64_t before = saved_bytes();
    const SavedHandle h = store->save(x, SaveRequest{Need::Value, nullptr, "conv2d", "conv1"});
    EXPECT_EQ(saved_bytes() - before, 1188 + 4 * c.scales) << c.scales;
    const SavedHandle h2 = store->save(x, SaveRequest{Need::Value, nullptr, "linear", "fc"});
    EXPECT_EQ(saved_bytes() - before, 1188 + 4 * c.scales) << "a buffer saved twice is encoded once";
    std::vector<SavedRecord> recs;
    store->describe(recs);
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].scheme, "fp8");
    EXPECT_EQ(recs[0].bytes, 1188 + 4 * c.scales);
    EXPECT_EQ(recs[0].bits, 8);
    EXPECT_EQ(recs[0].fp32_bytes, 4 * 1188);
    EXPECT_EQ(recs[1].bytes, 0);
    store->release(h);
    store->release(h2);
    EXPECT_EQ(saved_bytes(), before);
  }
}

TEST(Fp8Store, LoadsAreTheCodecsRoundTripAndItsDerivative) {
  const Tensor x = random_tensor({4, 3, 9, 11}, 2, -3.0f, 3.0f);
  const auto store = fp8({{"group_size", "64"}});
  const Fp8Config c{Fp8Format::E4M3, Fp8Scale::PerGroup, 64};
  Tensor codes = Tensor::empty({x.numel()}, DType::u8), scales = Tensor::empty({fp8_geometry(x.numel(), c).groups()});
  Tensor want = Tensor::empty(x.shape());
  fp8_encode(x, c, codes, scales);
  fp8_decode(codes, scales, c, want);
  const SavedHandle v = store->save(x, SaveRequest{Need::Value, nullptr, "conv2d", "conv1"});
  const std::vector<float> loaded = store->load(v).to_vector();
  EXPECT_EQ(loaded, want.to_vector());
  EXPECT_NE(loaded, x.to_vector()) << "8 bits are not lossless";
  double err = 0;
  for (size_t i = 0; i < loaded.size(); ++i) err = std::max(err, std::fabs(double(loaded[i]) - x.to_vector()[i]));
  EXPECT_LT(err, 3.0 / 16 + 1e-6) << "half an ulp of 3 in e4m3";
  EXPECT_GT(err, 0.0);

  const Pointwise& gelu = pointwise_by_name("gelu");
  const SavedHandle d = store->save(x, SaveRequest{Need::Derivative, &gelu, "gelu", "act"});
  const Tensor fd = store->load(d);
  const Tensor want_fd = pointwise_derivative(gelu, want);
  EXPECT_EQ(fd.to_vector(), want_fd.to_vector()) << "f' of the decoded x";

  const Pointwise& relu = pointwise_by_name("relu");
  const int64_t before = saved_bytes();
  const SavedHandle m = store->save(x, SaveRequest{Need::Derivative, &relu, "relu", "act2"});
  EXPECT_EQ(saved_bytes() - before, (x.numel() + 7) / 8) << "the relu family: an exact 1-bit mask";
  for (const SavedHandle& h : {v, d, m}) store->release(h);
}

TEST(Fp8Store, OptionsHaveDefaultsAndBadOnesNameTheirKey) {
  const auto store = fp8({});
  const auto& cfg = dynamic_cast<const Fp8Store&>(*store).config();
  EXPECT_EQ(cfg.format, Fp8Format::E4M3);
  EXPECT_EQ(cfg.scale, Fp8Scale::PerGroup);
  EXPECT_EQ(cfg.group_size, 128);
  const auto e5 = fp8({{"format", "e5m2"}, {"scale", "per_tensor"}});
  EXPECT_EQ(dynamic_cast<const Fp8Store&>(*e5).config().format, Fp8Format::E5M2);
  EXPECT_EQ(dynamic_cast<const Fp8Store&>(*e5).config().scale, Fp8Scale::PerTensor);

  auto error = [](Options o) { return message_of([&] { fp8(std::move(o)); }); };
  EXPECT_EQ(error({{"format", "e3m4"}}), "saved_tensors.default (line 3): 'format' is 'e3m4', must be one of: e4m3, e5m2");
  EXPECT_EQ(error({{"scale", "per_row"}}),
            "saved_tensors.default (line 3): 'scale' is 'per_row', must be one of: per_tensor, per_group");
  EXPECT_EQ(error({{"group_size", "0"}}), "saved_tensors.default (line 3): 'group_size' is 0, must be in [1, 1073741824]");
  EXPECT_EQ(error({{"group_size", "64x"}}), "saved_tensors.default (line 3): 'group_size' must be an integer, got '64x'");
  EXPECT_EQ(error({{"scale", "per_tensor"}, {"group_size", "64"}}),
            "saved_tensors.default (line 3): 'group_size' is for scale: per_group; scale: per_tensor keeps one scale "
            "for the whole tensor");
  EXPECT_EQ(error({{"bits", "8"}}), "saved_tensors.default (line 3): unknown key 'bits' for this scheme");
  // The registry lists it.
  const auto all = available_schemes();
  EXPECT_NE(std::find(all.begin(), all.end(), "fp8"), all.end());
}

// ---- models ------------------------------------------------------------------------------------

StorePolicySpec everything(Options options) {
  StorePolicySpec s;
  s.default_scheme = {"fp8", std::move(options), "test"};
  return s;
}

struct Step {
  std::vector<float> grads;
  std::vector<SavedRecord> records;
};

Step resnet_step(StorePolicy& policy) {
  PolicyScope scope(policy);
  ModelSpec m;
  m.arch = "resnet20";
  m.in_channels = 1;
  m.num_classes = 10;
  auto model = make_model(m);
  const Tensor x = random_tensor({8, 1, 16, 16}, 5);
  Tensor t = Tensor::empty({8}, DType::i64);
  for (int64_t i = 0; i < 8; ++i) t.data<int64_t>()[i] = i % 10;
  Step s;
  Tensor loss = ops::cross_entropy((*model)(x), t);
  s.records = policy.describe();
  backward(loss);
  for (auto& [name, p] : model->named_parameters()) {
    if (!p.grad().defined()) continue;
    const auto v = p.grad().to_vector();
    s.grads.insert(s.grads.end(), v.begin(), v.end());
  }
  return s;
}

Step vit_step(StorePolicy& policy) {
  PolicyScope scope(policy);
  VitConfig c = testing::small_vit_config();
  c.seed = 3;
  VisionTransformer m(c);
  const Tensor x = random_tensor({4, 3, 8, 8}, 9);
  Tensor t = Tensor::empty({4}, DType::i64);
  for (int64_t i = 0; i < 4; ++i) t.data<int64_t>()[i] = i;
  Step s;
  Tensor loss = ops::cross_entropy(m(x), t);
  s.records = policy.describe();
  backward(loss);
  for (auto& [name, p] : m.named_parameters()) {
    const auto v = p.grad().to_vector();
    s.grads.insert(s.grads.end(), v.begin(), v.end());
  }
  return s;
}

// ||a - b|| / ||b||.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

void expect_close_to_fp32(Step (*step)(StorePolicy&), const char* model) {
  Fp32Policy fp32;
  const Step base = step(fp32);
  struct Case {
    Options options;
    double tolerance;  // relative L2 error of all parameter gradients
  };
  for (const Case& c : {Case{{}, 0.05}, Case{{{"scale", "per_tensor"}}, 0.05},
                        Case{{{"format", "e5m2"}, {"group_size", "32"}}, 0.1}}) {
    std::string name = model;
    for (const auto& [k, v] : c.options) name += " " + k + "=" + v;
    SCOPED_TRACE(name);
    RulePolicy policy(everything(c.options));
    const Step s = step(policy);
    ASSERT_EQ(s.grads.size(), base.grads.size());
    int compressed = 0;
    for (const SavedRecord& r : s.records) {
      if (r.scheme != "fp8" || r.exact || r.statistics) continue;
      EXPECT_LT(r.bytes, r.numel * 4 / 3) << r.op << " " << r.layer;
      compressed += r.bits == 8;
    }
    EXPECT_GT(compressed, 5);
    const double err = relative_error(s.grads, base.grads);
    EXPECT_LT(err, c.tolerance);
    EXPECT_GT(err, 0.0) << "the saved tensors really went through 8 bits";
    std::printf("[ fp8 ] %s: gradient relative L2 error against FP32 %.4f\n", name.c_str(), err);
  }
}

TEST(Fp8Store, AResNetTrainsBackwardWithGradientsCloseToFp32) { expect_close_to_fp32(resnet_step, "resnet20"); }

TEST(Fp8Store, AVitTrainsBackwardWithGradientsCloseToFp32) { expect_close_to_fp32(vit_step, "vit"); }

// ---- measured: the round trip on the tensors a ResNet-20 saves for a Fashion-MNIST batch ---------

// An FP32 policy that, at each save fp8 would encode (an f32 Value or Derivative, not exact, not a
// step function's derivative), encodes and decodes the buffer as it lies under every config, adding
// up the squared error, the squared values and the bytes.
class MeasuringPolicy : public StorePolicy {
 public:
  struct Sum {
    Fp8Config config;
    double err_sq = 0, x_sq = 0;
    int64_t numel = 0, bytes = 0;
  };
  class Store : public Fp32Store {
   public:
    SavedHandle save(const Tensor& x, const SaveRequest& r) override {
      const bool coded = x.dtype() == DType::f32 && !r.exact &&
                         (r.need == Need::Value || (r.need == Need::Derivative && !r.fn->derivative_is_step));
      if (coded && seen.insert(x.storage().get()).second) {
        TagScope scratch(MemTag::Workspace);
        const std::vector<float> v = x.to_vector();
        for (Sum& s : sums) {
          const Fp8Geometry g = fp8_geometry(x.numel(), s.config);
          Tensor codes = Tensor::empty({g.numel}, DType::u8), scales = Tensor::empty({g.groups()});
          Tensor back = Tensor::empty(x.shape(), DType::f32, x.layout());
          fp8_encode(x, s.config, codes, scales);
          fp8_decode(codes, scales, s.config, back);
          const std::vector<float> b = back.to_vector();
          for (size_t i = 0; i < v.size(); ++i) s.err_sq += (double(b[i]) - v[i]) * (double(b[i]) - v[i]), s.x_sq += double(v[i]) * v[i];
          s.numel += g.numel;
          s.bytes += g.numel + 4 * g.groups();
        }
      }
      return Fp32Store::save(x, r);
    }
    std::vector<Sum> sums;
    std::set<const Storage*> seen;
  };
  SavedTensorStore& store_for(const SaveRequest&) override { return store; }
  std::vector<SavedTensorStore*> stores() override { return {&store}; }
  Store store;
};

TEST(Fp8Store, RoundTripOnTheTensorsAResNetSavesForFashionMnist) {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  const auto images_file = data::idx_images_file(dir, data::Split::Test);
  if (!std::filesystem::exists(images_file)) GTEST_SKIP() << "no Fashion-MNIST at " << dir;
  const data::IdxArray images = data::read_idx(images_file, 3, "fashion_mnist test");
  const int64_t n = 64, hw = images.dims[1] * images.dims[2];
  Tensor x = Tensor::empty({n, 1, images.dims[1], images.dims[2]});  // (N, 1, 28, 28), normalised as configs do
  for (int64_t i = 0; i < n * hw; ++i) x.data<float>()[i] = (images.data[static_cast<size_t>(i)] / 255.0f - 0.2860f) / 0.3530f;
  Tensor t = Tensor::empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = i % 10;

  MeasuringPolicy policy;
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (Fp8Scale s : {Fp8Scale::PerTensor, Fp8Scale::PerGroup}) policy.store.sums.push_back({{f, s, 128}});
  {
    PolicyScope scope(policy);
    ModelSpec m;
    m.arch = "resnet20";
    m.in_channels = 1;
    auto model = make_model(m);
    Tensor loss = ops::cross_entropy((*model)(x), t);
    backward(loss);
  }
  std::printf("[ fp8 ] ResNet-20, one training step on 64 Fashion-MNIST test images (untrained weights):\n");
  for (const auto& s : policy.store.sums) {
    const double rel = std::sqrt(s.err_sq / s.x_sq), bpe = double(s.bytes) / double(s.numel);
    std::printf("[ fp8 ] | %s | %s | %.4f | %.4f | %lld elements |\n", std::string(fp8_format_name(s.config.format)).c_str(),
                std::string(fp8_scale_name(s.config.scale)).c_str(), rel, bpe, static_cast<long long>(s.numel));
    EXPECT_GT(s.numel, 100000);
    EXPECT_GT(rel, 0.0);
    // Half an ulp relative is 2^-4 (e4m3) / 2^-3 (e5m2) at worst; the RMS lies well inside.
    EXPECT_LT(rel, s.config.format == Fp8Format::E4M3 ? 0.0625 : 0.125);
    EXPECT_LE(bpe, s.config.scale == Fp8Scale::PerTensor ? 1.001 : 1.0 + 4.0 / 128 + 1e-3);
  }
}

}  // namespace
}  // namespace packrat
