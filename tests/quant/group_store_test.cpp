// The per-group store: every request kind, bytes equal to the formula and to the allocator's
// Saved tag, dedup of a tensor saved twice, exact masks/indices/step derivatives, the
// in-place check, Philox keying per step and tensor, config errors, and a linear layer
// trained through the store.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/error.h"
#include "quant/group/group_store.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::random_tensor;

class OneStorePolicy : public StorePolicy {
 public:
  explicit OneStorePolicy(SavedTensorStore& s) : s_(s) {}
  SavedTensorStore& store_for(const SaveRequest&) override { return s_; }
  std::vector<SavedTensorStore*> stores() override { return {&s_}; }

 private:
  SavedTensorStore& s_;
};

int64_t saved_bytes() { return Allocator::cpu().current(MemTag::Saved); }

SaveRequest value_request(std::string name = "layer") {
  SaveRequest r;
  r.need = Need::Value;
  r.op = "conv2d";
  r.name = std::move(name);
  return r;
}

GroupStoreOptions options(int bits, int64_t G = 256, MetaType meta = MetaType::BF16) {
  GroupStoreOptions o;
  o.quant.bits = bits;
  o.quant.group_size = G;
  o.quant.meta = meta;
  return o;
}

// Codes + metadata by the formula of the issue, per-sample grouping of (N, rest).
int64_t formula_bytes(int64_t N, int64_t rest, int64_t G, int bits, int meta_per_group) {
  const int64_t groups = (rest + G - 1) / G, tail = rest - (groups - 1) * G;
  return N * ((groups - 1) * ((G * bits + 7) / 8) + (tail * bits + 7) / 8) + N * groups * meta_per_group;
}

TEST(GroupStore, ValueRoundTripPlainAndBlockedWithFormulaBytes) {
  for (Layout layout : {Layout::Plain, Layout::nChw16c, Layout::nChw8c})
    for (int bits : {2, 4, 8}) {
      GroupStore store(options(bits, 100));
      Tensor x = random_tensor({3, 16, 5, 7}, 11).to_layout(layout);  // (N, C, H, W): 560 per sample
      const int64_t before = saved_bytes();
      SavedHandle h = store.save(x, value_request());
      const int64_t expected = formula_bytes(3, 560, 100, bits, 4);
      EXPECT_EQ(saved_bytes() - before, expected) << "bits " << bits;
      std::vector<SavedRecord> recs;
      store.describe(recs);
      ASSERT_EQ(recs.size(), 1u);
      EXPECT_EQ(recs[0].bytes, expected);
      EXPECT_EQ(recs[0].bits, bits);
      EXPECT_EQ(recs[0].scheme, "actnn");
      EXPECT_EQ(recs[0].fp32_bytes, x.numel() * 4);
      Tensor y = store.load(h);
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_EQ(y.layout(), layout);
      // Raw buffers compared: y comes back in x's layout.
      const float *xp = x.data<float>(), *yp = y.data<float>();
      const float step = 2.0f / static_cast<float>((1 << bits) - 1) * 1.02f;  // values in [-1, 1)
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_LE(std::abs(xp[i] - yp[i]), step) << i;
      store.release(h);
      EXPECT_EQ(saved_bytes(), before);
      EXPECT_EQ(store.live_count(), 0u);
    }
}

// Groups of a blocked (nChw16c, nChw8c) tensor are walked in plain order, whatever the grouping:
// per-plane groups hold one channel's elements although 16 or 8 channels lie interleaved, per-sample and flat
// groups the plain tensor's runs (one channel's for planes of at least G, as ActNN groups an NCHW
// tensor). The loaded tensor comes back in the saved layout, with the values, codes and bytes of
// the plain tensor's.
TEST(GroupStore, GroupsAreTheSameForPlainAndBlockedTensors) {
  struct Case {
    Shape shape;              // (N, C, H, W)
    int64_t per_plane_bytes;  // 2-bit codes (whole bytes per group) + 4 metadata bytes per group
  };
  const Case cases[] = {
      {{2, 16, 7, 7}, 2 * 16 * ((49 * 2 + 7) / 8 + 4)},  // planes of 49: one group a plane
      {{3, 32, 5, 5}, 3 * 16 * ((50 * 2 + 7) / 8 + 4)},  // planes of 25: two to a group, across blocks
      // planes of 9: seven to a group (63), the last group of a sample 4 planes (36); groups
      // across the 16-channel tiles
      {{2, 32, 3, 3}, 2 * (4 * ((63 * 2 + 7) / 8 + 4) + (36 * 2 / 8 + 4))},
      {{2, 32, 8, 8}, 2 * 32 * ((64 * 2 + 7) / 8 + 4)},  // planes of 64: one group a plane
      // planes of 9, seven to a group, six such and one of six planes a sample; 86400 values: the
      // groups split between threads (at tile edges: group_at_tile_edge), groups across tiles
      // (quant/cpu/plain_runs.h)
      {{200, 48, 3, 3}, 200 * (6 * ((63 * 2 + 7) / 8 + 4) + ((54 * 2 + 7) / 8 + 4))},
  };
  for (Grouping grouping : {Grouping::PerPlane, Grouping::PerSample, Grouping::Flat}) {
    GroupStoreOptions o = options(2, 64);
    o.quant.grouping = grouping;
    for (const Case& c : cases) {
      const std::string what = c.shape.str() + " " + std::string(grouping_name(grouping));
      Tensor x = random_tensor(c.shape, 13);
      std::vector<Tensor> loaded;
      std::vector<int64_t> bytes;
      for (Layout layout : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
        GroupStore store(o);
        store.begin_step(3);
        const int64_t before = saved_bytes();
        const Tensor xl = x.to_layout(layout);
        if (layout == Layout::NHWC)  // the CPU's codecs walk it as one block of all channels, with no plain copy
          EXPECT_FALSE(codec_order(xl, group_geometry_of(xl, o.quant)).via_plain) << what;
        SavedHandle h = store.save(xl, value_request());
        bytes.push_back(saved_bytes() - before);
        Tensor y = store.load(h);
        EXPECT_EQ(y.layout(), layout);
        loaded.push_back(y.to_plain());
        store.release(h);
      }
      if (grouping == Grouping::PerPlane) {
        EXPECT_EQ(bytes[0], c.per_plane_bytes) << what;
      }
      const float *a = loaded[0].data<float>(), *xp = x.data<float>();
      for (size_t k = 1; k < loaded.size(); ++k) {
        EXPECT_EQ(bytes[k], bytes[0]) << what << " layout " << k;
        const float* b = loaded[k].data<float>();
        for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(a[i], b[i]) << what << " layout " << k << " element " << i;
      }
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_LE(std::abs(a[i] - xp[i]), 2.0f / 3.0f * 1.02f) << i;
    }
  }
}

TEST(GroupStore, TensorSavedTwiceIsQuantizedOnce) {
  GroupStore store(options(2));
  Tensor x = random_tensor({4, 300}, 2);
  const int64_t before = saved_bytes();
  SavedHandle a = store.save(x, value_request("a"));
  const int64_t once = saved_bytes() - before;
  SavedHandle b = store.save(x.reshape({4, 3, 100}), value_request("b"));
  EXPECT_EQ(saved_bytes() - before, once);
  EXPECT_EQ(store.step_tensors().size(), 1u);
  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_FALSE(recs[0].shared);
  EXPECT_TRUE(recs[1].shared);
  EXPECT_EQ(recs[1].bytes, 0);
  EXPECT_EQ(recs[0].bytes, once);
  EXPECT_EQ(store.load(a).to_vector(), store.load(b).to_vector());
  EXPECT_EQ(store.load(b).shape(), Shape({4, 3, 100}));
  store.release(a);
  EXPECT_EQ(saved_bytes() - before, once);  // still held for b
  store.release(b);
  EXPECT_EQ(saved_bytes(), before);
  // Modified in place between two saves: a new tensor, quantized again.
  SavedHandle c = store.save(x, value_request());
  x.bump_version();
  SavedHandle d = store.save(x, value_request());
  EXPECT_EQ(saved_bytes() - before, 2 * once);
  store.release(d);
  store.release(c);
}

TEST(GroupStore, MasksAndIndicesAreExactAndPacked) {
  GroupStore store(options(2));
  const int64_t n = 1001;
  Tensor mask = Tensor::empty({7, 143}, DType::u8);
  Tensor idx = Tensor::empty({7, 143}, DType::i32);
  PhiloxStream s(3, 4);
  for (int64_t i = 0; i < n; ++i) {
    mask.data<uint8_t>()[i] = s.uniform() < 0.4f;
    idx.data<int32_t>()[i] = static_cast<int32_t>(s.below(9));
  }
  const int64_t before = saved_bytes();
  SaveRequest mr{Need::Mask, nullptr, "dropout", "drop"};
  SaveRequest ir{Need::Index, nullptr, "maxpool2d", "pool"};
  ir.index_bits = 4;  // 3x3 window
  SavedHandle hm = store.save(mask, mr), hi = store.save(idx, ir);
  EXPECT_EQ(saved_bytes() - before, (n + 7) / 8 + (4 * n + 7) / 8);
  Tensor m2 = store.load(hm), i2 = store.load(hi);
  EXPECT_EQ(m2.dtype(), DType::u8);
  EXPECT_EQ(i2.dtype(), DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(m2.data<uint8_t>()[i], mask.data<uint8_t>()[i]);
    ASSERT_EQ(i2.data<int32_t>()[i], idx.data<int32_t>()[i]);
  }
  std::vector<SavedRecord> recs;
  store.describe(recs);
  EXPECT_EQ(recs[0].bits, 1);
  EXPECT_EQ(recs[1].bits, 4);
  store.release(hm);
  store.release(hi);
  ir.index_bits = 3;
  EXPECT_THROW(store.save(idx, ir), Error);  // 8 does not fit in 3 bits
}

TEST(GroupStore, ExactRequestsStayFp32) {
  GroupStore store(options(2));
  Tensor stats = random_tensor({64}, 5);
  SaveRequest r{Need::Value, nullptr, "batchnorm2d", "bn1"};
  r.exact = true;
  const int64_t before = saved_bytes();
  SavedHandle h = store.save(stats, r);
  EXPECT_EQ(saved_bytes() - before, 64 * 4);
  EXPECT_EQ(h.store->load(h).to_vector(), stats.to_vector());
  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].bytes, 64 * 4);
  h.store->release(h);
  EXPECT_EQ(store.live_count(), 0u);
}

TEST(GroupStore, DerivativeUsesDequantizedInputAndStepFunctionsKeepAnExactMask) {
  GroupStore store(options(8));
  Tensor x = random_tensor({2, 512}, 8, -3.0f, 3.0f);
  Tensor g = random_tensor({2, 512}, 9);
  {  // gelu: f'(dequantized x)
    SaveRequest r{Need::Derivative, &pointwise_by_name("gelu"), "gelu", "act"};
    auto [y, h] = store.forward_and_save(x, r);
    Tensor gx = store.apply_derivative(h, g);
    const auto xv = x.to_vector(), gv = g.to_vector(), gxv = gx.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) ASSERT_NEAR(gxv[i], gv[i] * r.fn->df(xv[i]), 0.02f) << i;
    store.release(h);
  }
  for (const char* name : {"relu", "leaky_relu", "relu6"}) {  // exact, 1 bit per element
    const Pointwise& fn = pointwise_by_name(name);
    SaveRequest r{Need::Derivative, &fn, name, "act"};
    const int64_t before = saved_bytes();
    auto [y, h] = store.forward_and_save(x, r);
    EXPECT_EQ(saved_bytes() - before, 1024 / 8) << name;
    Tensor gx = store.apply_derivative(h, g);
    const auto xv = x.to_vector(), gv = g.to_vector(), gxv = gx.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(gxv[i], gv[i] * fn.df(xv[i])) << name << " " << i;
    store.release(h);
  }
}

// A derivative is applied in one pass over the dequantized input: the product grad * load(h)
// gives, holding one Workspace tensor (x dequantized), not two (x and f'(x)).
TEST(GroupStore, ADerivativeIsAppliedToTheDequantizedInputWithoutAnFPrimeTensor) {
  GroupStore store(options(4));
  const Tensor x = random_tensor({4, 512}, 10, -3.0f, 3.0f), g = random_tensor({4, 512}, 11);
  SaveRequest r{Need::Derivative, &pointwise_by_name("gelu"), "gelu", "act"};
  auto [y, h] = store.forward_and_save(x, r);
  const Tensor want = multiply_elementwise(g, store.load(h));
  Allocator::cpu().reset_peak();
  const int64_t before = Allocator::cpu().current(MemTag::Workspace);
  const Tensor gx = store.apply_derivative(h, g);
  EXPECT_EQ(Allocator::cpu().peak(MemTag::Workspace) - before, x.numel() * 4);
  EXPECT_EQ(gx.to_vector(), want.to_vector());
  store.release(h);
}

TEST(GroupStore, ModifiedInPlaceAfterSaveIsAnError) {
  GroupStore store(options(2));
  Tensor x = random_tensor({2, 64}, 1);
  SavedHandle h = store.save(x, value_request("layer3.conv"));
  x.bump_version();
  try {
    store.load(h);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer3.conv"), std::string::npos) << e.what();
  }
  store.release(h);
  EXPECT_THROW(store.load(h), Error);  // released
}

TEST(GroupStore, NoiseIsKeyedByStepAndTensorAndCanBeRedrawnForOne) {
  GroupStore store(options(2));
  Tensor a = random_tensor({2, 1024}, 1), b = random_tensor({2, 1024}, 2);
  auto draw = [&](int64_t step) {
    store.begin_step(step);
    SavedHandle ha = store.save(a, value_request()), hb = store.save(b, value_request());
    auto out = std::make_pair(store.load(ha).to_vector(), store.load(hb).to_vector());
    store.release(ha);
    store.release(hb);
    return out;
  };
  const auto s1 = draw(1), s1b = draw(1), s2 = draw(2);
  EXPECT_EQ(s1, s1b);                // reproducible
  EXPECT_NE(s1.first, s2.first);     // another step, other noise
  EXPECT_NE(s1.first, s1.second);
  store.set_noise_salt(1, 99);       // re-draw tensor 1 only
  const auto r = draw(1);
  EXPECT_EQ(r.first, s1.first);
  EXPECT_NE(r.second, s1.second);
  store.clear_noise_salts();
  EXPECT_EQ(draw(1), s1);
}

TEST(GroupStore, FactoryReadsOptionsAndRejectsBadConfig) {
  auto make = [](std::map<std::string, std::string> kv) {
    SchemeOptions o(std::move(kv), "saved_tensors.default (line 3)");
    return make_group_store(o);
  };
  EXPECT_EQ(dynamic_cast<GroupStore&>(*make({{"grouping", "per_plane"}})).options().quant.grouping,
            Grouping::PerPlane);
  auto s = make({{"bits", "4"}, {"group_size", "128"}, {"grouping", "flat"}, {"meta", "f32"}, {"rounding", "nearest"},
                 {"seed", "7"}});
  auto& g = dynamic_cast<GroupStore&>(*s);
  EXPECT_EQ(g.options().quant.bits, 4);
  EXPECT_EQ(g.options().quant.group_size, 128);
  EXPECT_EQ(g.options().quant.grouping, Grouping::Flat);
  EXPECT_EQ(g.options().quant.meta, MetaType::F32);
  EXPECT_EQ(g.options().quant.rounding, Rounding::Nearest);
  EXPECT_EQ(g.options().seed, 7u);
  EXPECT_EQ(dynamic_cast<GroupStore&>(*make({})).options().quant.bits, 2);
  for (auto bad : std::vector<std::map<std::string, std::string>>{
           {{"bits", "5"}}, {{"bits", "0"}}, {{"group_size", "0"}}, {{"grouping", "rows"}}, {{"bitz", "2"}}}) {
    try {
      make(bad);
      FAIL() << bad.begin()->first << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.begin()->first), std::string::npos) << e.what();
    }
  }
}

// A linear layer trained through the store: the input is quantized (bytes from the allocator's
// Saved tag equal the formula), the weight is a parameter and is not, and the gradients match
// FP32 within the quantization error; Saved is back to zero after backward.
TEST(GroupStore, ServesLinearLayerThroughAutograd) {
  GroupStore store(options(4, 64));
  OneStorePolicy policy(store);
  Tensor w = Tensor::empty({8, 96}, DType::f32, Layout::Plain, MemTag::Parameter);
  Tensor src = random_tensor({8, 96}, 4);
  std::memcpy(w.raw(), src.raw(), src.nbytes());
  w.set_requires_grad();
  Tensor x = random_tensor({16, 96}, 5);
  x.set_requires_grad();

  auto run = [&](bool quantized) {
    w.zero_grad();
    x.zero_grad();
    std::unique_ptr<PolicyScope> scope;
    if (quantized) scope = std::make_unique<PolicyScope>(policy);
    const int64_t before = saved_bytes();
    Tensor y = ops::linear(x, w, Tensor());
    if (quantized) {
      EXPECT_EQ(saved_bytes() - before, formula_bytes(16, 96, 64, 4, 4));
    }
    backward(y, testing::random_tensor({16, 8}, 6));
    EXPECT_EQ(saved_bytes(), before);
    return std::make_pair(w.grad().to_vector(), x.grad().to_vector());
  };
  const auto exact = run(false), quant = run(true);
  double err = 0, norm = 0;
  for (size_t i = 0; i < exact.first.size(); ++i) {
    err += std::pow(quant.first[i] - exact.first[i], 2);
    norm += std::pow(exact.first[i], 2);
  }
  EXPECT_LT(std::sqrt(err / norm), 0.1);
  EXPECT_GT(err, 0.0);  // the input really was quantized
  EXPECT_EQ(quant.second, exact.second);  // dx = dy W needs only the (exact) weight
}


// conv -> batchnorm -> relu -> conv -> maxpool at 2 bits: every request kind of a ResNet block is
// served (quantized inputs, exact 1-bit relu mask, 2-bit argmax, exact batchnorm statistics),
// the saved bytes are under a twelfth of FP32's, backward runs and Saved returns to zero.
TEST(GroupStore, ConvBlockSavesUnderATwelfthOfFp32) {
  auto param = [](const Shape& s, uint64_t k, float scale) {
    Tensor p = Tensor::empty(s, DType::f32, Layout::Plain, MemTag::Parameter);
    Tensor v = random_tensor(s, k, -scale, scale);
    std::memcpy(p.raw(), v.raw(), v.nbytes());
    return p;
  };
  Tensor w1 = param({32, 32, 3, 3}, 1, 0.1f), w2 = param({32, 32, 3, 3}, 2, 0.1f);
  Tensor gamma = param({32}, 3, 1.0f), beta = param({32}, 4, 1.0f);
  Tensor mean = param({32}, 5, 0.0f), var = Tensor::empty({32}, DType::f32, Layout::Plain, MemTag::Parameter);
  for (int i = 0; i < 32; ++i) var.data<float>()[i] = 1.0f;
  for (Tensor* t : {&w1, &w2, &gamma, &beta}) t->set_requires_grad();
  Tensor x = random_tensor({4, 32, 16, 16}, 6);
  Tensor seed = random_tensor({4, 32, 8, 8}, 7);
  ops::Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  ops::Pool2dOptions po{2, 2, 2, 2};

  auto run = [&](StorePolicy& policy, std::vector<SavedRecord>* recs) {
    PolicyScope scope(policy);
    const int64_t before = saved_bytes();
    Tensor c1 = ops::conv2d(x, w1, Tensor(), co);
    Tensor r1 = ops::relu(ops::batchnorm2d(c1, gamma, beta, mean, var, true));
    Tensor out = ops::maxpool2d(ops::conv2d(r1, w2, Tensor(), co), po);
    const int64_t held = saved_bytes() - before;
    if (recs) *recs = policy.describe();
    backward(out, seed.to_layout(out.layout()));
    EXPECT_EQ(saved_bytes(), before);
    return held;
  };
  Fp32Policy fp32;
  const int64_t fp32_bytes = run(fp32, nullptr);
  GroupStore store(options(2));
  OneStorePolicy policy(store);
  std::vector<SavedRecord> recs;
  const int64_t q_bytes = run(policy, &recs);
  EXPECT_LE(q_bytes * 12, fp32_bytes) << q_bytes << " vs " << fp32_bytes;
  int64_t sum = 0;
  std::map<std::string, int> kinds;
  for (const auto& r : recs) {
    sum += r.bytes;
    kinds[r.op + "/" + r.scheme + "/" + std::to_string(static_cast<int>(r.bits))]++;
  }
  EXPECT_EQ(sum, q_bytes);  // the report counts exactly what the allocator holds
  EXPECT_EQ(kinds["conv2d/actnn/2"], 2);
  EXPECT_EQ(kinds["batchnorm2d/actnn/2"], 1);
  EXPECT_EQ(kinds["relu/actnn/1"], 1);
  EXPECT_EQ(kinds["maxpool2d/actnn/2"], 1);
  EXPECT_GE(kinds["batchnorm2d/fp32/32"], 1);  // statistics kept exactly
  EXPECT_TRUE(std::isfinite(w1.grad().to_vector()[0]));
}

}  // namespace
}  // namespace packrat
