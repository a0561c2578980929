#include "quant/fewbit/fewbit_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/pointwise.h"
#include "autograd/tape.h"
#include "core/error.h"
#include "core/philox.h"
#include "quant/bits/bitpack.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::random_tensor;

// Derivative and mask requests to the few-bit store, everything else to FP32.
class FewbitPolicy : public StorePolicy {
 public:
  explicit FewbitPolicy(int bits) : fewbit_(FewbitStoreOptions{bits, {}}) {}
  SavedTensorStore& store_for(const SaveRequest& r) override {
    if (fewbit_.accepts(r)) return fewbit_;
    return fp32_;
  }
  std::vector<SavedTensorStore*> stores() override { return {&fewbit_, &fp32_}; }
  FewbitStore fewbit_;
  Fp32Store fp32_;
};

// dL/dx of sum(activation(x) * seed) under the current policy.
// With `store`, checks that the activation's save went there.
std::vector<float> activation_grad(const Tensor& x_in, const char* fn, const Tensor& seed, std::vector<float>* y = nullptr,
                                   const SavedTensorStore* store = nullptr) {
  Tensor x = x_in.clone();
  x.set_requires_grad();
  Tensor out = ops::activation(x, fn);
  if (store) {
    EXPECT_EQ(store->live_count(), 1u) << fn << " was not saved by the few-bit store";
  }
  if (y) *y = out.to_vector();
  backward(out, seed);
  return x.grad().to_vector();
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Inputs that hit the step points exactly (0 and 6) as well as random values.
Tensor step_input(const Shape& s, uint64_t seed) {
  Tensor x = random_tensor(s, seed, -8.0f, 8.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); i += 7) p[i] = (i / 7) % 3 == 0 ? 0.0f : ((i / 7) % 3 == 1 ? 6.0f : -0.0f);
  return x;
}

TEST(FewBitStore, StepActivationsGiveBitIdenticalGradients) {
  const Shape shape{3, 5, 7, 11};  // 1155 elements: not a multiple of 8
  const Tensor x = step_input(shape, 11);
  const Tensor seed = random_tensor(shape, 12);
  for (const char* fn : {"relu", "leaky_relu", "relu6"}) {
    std::vector<float> y32, yfb;
    const auto g32 = activation_grad(x, fn, seed, &y32);
    FewbitPolicy policy(3);
    std::vector<float> gfb;
    {
      PolicyScope scope(policy);
      gfb = activation_grad(x, fn, seed, &yfb, &policy.fewbit_);
    }
    EXPECT_TRUE(bitwise_equal(g32, gfb)) << fn;
    EXPECT_TRUE(bitwise_equal(y32, yfb)) << fn;
    EXPECT_EQ(policy.fewbit_.live_count(), 0u) << fn << ": released after backward";
  }
}

// Whatever bit-width the store is configured with, a step derivative is held as a 1-bit mask.
TEST(FewBitStore, StepActivationsHoldOneBitPerElement) {
  const Tensor x = step_input({1001}, 13);
  FewbitStore store({4, {}});
  SaveRequest r;
  r.need = Need::Derivative;
  r.fn = &pointwise_by_name("relu6");
  r.op = "relu6";
  auto [y, h] = store.forward_and_save(x, r);
  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].bits, 1);
  EXPECT_EQ(recs[0].bytes, packed_bytes(1001, 1));
  // load() hands back f'(x) exactly.
  const auto d = store.load(h).to_vector(), xs = x.to_vector();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(d[i], pointwise_by_name("relu6").df(xs[i])) << xs[i];
}

TEST(FewBitStore, DropoutMaskIsExact) {
  const Shape shape{4, 33};
  const Tensor x = random_tensor(shape, 21);
  const Tensor seed = random_tensor(shape, 22);
  auto run = [&] {
    Tensor xx = x.clone();
    xx.set_requires_grad();
    Tensor y = ops::dropout(xx, 0.3f, true, 5, 9);
    backward(y, seed);
    return xx.grad().to_vector();
  };
  const auto g32 = run();
  FewbitPolicy policy(2);
  PolicyScope scope(policy);
  EXPECT_TRUE(bitwise_equal(g32, run()));
}

// Eq. 3 with uniform weight on [-10, 10] is 20 x the mean square error of q(x) for x ~ U(-10, 10):
// what the store hands back has exactly the table's error.
TEST(FewBitStore, LoadedDerivativeHasTheTableError) {
  const Shape shape{1 << 18};
  const Tensor x = random_tensor(shape, 31, -10.0f, 10.0f);
  for (const char* fn : {"gelu", "sigmoid"})
    for (int bits : {1, 3}) {
      FewbitStore store({bits, {}});
      SaveRequest r;
      r.need = Need::Derivative;
      r.fn = &pointwise_by_name(fn);
      r.op = fn;
      auto [y, h] = store.forward_and_save(x, r);
      const auto q = store.load(h).to_vector();
      const auto xs = x.to_vector();
      const FewbitFunction& f = fewbit_function(fn);
      double mse = 0;
      for (size_t i = 0; i < xs.size(); ++i) mse += std::pow(q[i] - f.df(xs[i]), 2);
      mse /= static_cast<double>(xs.size());
      EXPECT_NEAR(mse * 20, fewbit_table(fn, bits).error, 0.03 * fewbit_table(fn, bits).error) << fn << " " << bits;
      store.release(h);
    }
}

// Training-style check on a small chain linear -> gelu -> linear: the weight gradients under
// the few-bit store differ from FP32's by at most what the table's sup error allows:
// |dW1 - dW1'| <= max|f' - q| * sum_n |g[n, i]| |x[n, j]|, g = grad at the gelu output.
TEST(FewBitStore, ChainGradientWithinTheTableBound) {
  const int64_t N = 16, I = 12, H = 20, O = 5;
  const Tensor x = random_tensor({N, I}, 41, -2.0f, 2.0f);
  const Tensor w1 = random_tensor({H, I}, 42, -1.0f, 1.0f), b1 = random_tensor({H}, 43);
  const Tensor w2 = random_tensor({O, H}, 44), b2 = random_tensor({O}, 45);
  const Tensor seed = random_tensor({N, O}, 46);
  auto run = [&](std::vector<float>& dw1, std::vector<float>& dw2) {
    Tensor a = w1.clone(), c = w2.clone();
    a.set_requires_grad();
    c.set_requires_grad();
    Tensor out = ops::linear(ops::gelu(ops::linear(x, a, b1)), c, b2);
    backward(out, seed);
    dw1 = a.grad().to_vector();
    dw2 = c.grad().to_vector();
  };
  std::vector<float> w1_32, w2_32;
  run(w1_32, w2_32);
  // g = seed @ w2: the gradient reaching the gelu output, the same under both stores.
  const auto s = seed.to_vector(), w2v = w2.to_vector(), xv = x.to_vector();
  std::vector<double> g(static_cast<size_t>(N * H), 0.0);  // (N, H)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t o = 0; o < O; ++o) g[n * H + h] += s[n * O + o] * w2v[o * H + h];
  for (int bits = 1; bits <= 4; ++bits) {
    FewbitPolicy policy(bits);
    std::vector<float> w1_fb, w2_fb;
    {
      PolicyScope scope(policy);
      run(w1_fb, w2_fb);
    }
    const double sup = fewbit_table("gelu", bits).max_abs_error;
    double worst = 0, mean_abs_diff = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < I; ++i) {
        double bound = 0;
        for (int64_t n = 0; n < N; ++n) bound += std::abs(g[n * H + h]) * std::abs(xv[n * I + i]);
        bound = sup * bound + 1e-4;
        const double diff = std::abs(w1_fb[h * I + i] - w1_32[h * I + i]);
        EXPECT_LE(diff, bound) << bits << " bits, dW1[" << h << ", " << i << "]";
        worst = std::max(worst, diff / bound);
        mean_abs_diff += diff;
      }
    EXPECT_GT(mean_abs_diff, 0.0) << "the few-bit path must actually approximate";
    // dW2 only sees the forward, which the store computes exactly.
    for (size_t k = 0; k < w2_32.size(); ++k) EXPECT_NEAR(w2_fb[k], w2_32[k], 1e-5);
  }
}

// Bytes held are exactly ceil(n * b / 8) per tensor, read from the allocator's Saved account.
TEST(FewBitStore, HoldsExactlyThePackedBytes) {
  auto& alloc = Allocator::cpu();
  for (int bits = 1; bits <= 4; ++bits)
    for (int64_t n : {1, 7, 8, 9, 1000, 4099}) {
      const Tensor x = random_tensor({n}, 51);
      FewbitStore store({bits, {}});
      SaveRequest r;
      r.need = Need::Derivative;
      r.fn = &pointwise_by_name("gelu");
      r.op = "gelu";
      r.name = "block.act";
      const int64_t before = alloc.current(MemTag::Saved);
      auto [y, h] = store.forward_and_save(x, r);
      EXPECT_EQ(alloc.current(MemTag::Saved) - before, packed_bytes(n, bits)) << bits << " bits, n=" << n;
      std::vector<SavedRecord> recs;
      store.describe(recs);
      ASSERT_EQ(recs.size(), 1u);
      EXPECT_EQ(recs[0].scheme, "fewbit");
      EXPECT_EQ(recs[0].bits, bits);
      EXPECT_EQ(recs[0].bytes, packed_bytes(n, bits));
      EXPECT_EQ(recs[0].fp32_bytes, n * 4);
      EXPECT_EQ(recs[0].layer, "block.act");
      EXPECT_EQ(recs[0].op, "gelu");
      store.release(h);
      EXPECT_EQ(alloc.current(MemTag::Saved), before);
    }
  // GELU at 3 bits on the benchmark shape: 3/32 of FP32's bytes.
  const Tensor big = Tensor::zeros({64, 64, 32, 32});
  FewbitStore store({3, {}});
  SaveRequest r;
  r.need = Need::Derivative;
  r.fn = &pointwise_by_name("gelu");
  auto [y, h] = store.forward_and_save(big, r);
  std::vector<SavedRecord> recs;
  store.describe(recs);
  EXPECT_EQ(recs[0].bytes * 32, recs[0].fp32_bytes * 3);
}

// The blocked layout is worked on as it lies; output and gradient keep it.
TEST(FewBitStore, BlockedLayoutMatchesPlain) {
  const Shape shape{2, 32, 3, 5};
  const Tensor x = random_tensor(shape, 61, -5.0f, 5.0f);
  const Tensor seed = random_tensor(shape, 62);
  FewbitPolicy policy(3);
  PolicyScope scope(policy);
  std::vector<float> y_plain, y_blk;
  const auto g_plain = activation_grad(x, "gelu", seed, &y_plain, &policy.fewbit_);
  Tensor xb = x.to_layout(Layout::nChw16c);
  xb.set_requires_grad();
  Tensor yb = ops::activation(xb, "gelu");
  EXPECT_EQ(yb.layout(), Layout::nChw16c);
  backward(yb, seed.to_layout(Layout::nChw16c));
  EXPECT_EQ(xb.grad().layout(), Layout::nChw16c);
  EXPECT_TRUE(bitwise_equal(yb.to_vector(), y_plain));
  EXPECT_TRUE(bitwise_equal(xb.grad().to_vector(), g_plain));
}

// save() of y = f(x) (sigmoid, tanh: derivative_from_output) indexes y with mapped borders and
// picks the same interval as x, except within float rounding of a border.
TEST(FewBitStore, SaveOfTheOutputIndexesLikeTheInput) {
  const Tensor x = random_tensor({5000}, 71, -6.0f, 6.0f);
  for (const char* fn : {"sigmoid", "tanh"}) {
    const Pointwise& p = pointwise_by_name(fn);
    ASSERT_NE(p.derivative_from_output, nullptr);
    FewbitStore store({3, {}});
    SaveRequest r;
    r.need = Need::Derivative;
    r.fn = &p;
    r.op = fn;
    auto [y, hx] = store.forward_and_save(x, r);
    SavedHandle hy = store.save(y, r);
    const auto qx = store.load(hx).to_vector(), qy = store.load(hy).to_vector();
    const FewbitTable& t = fewbit_table(fn, 3);
    const auto xs = x.to_vector();
    int differ = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (qx[i] == qy[i]) continue;
      ++differ;
      double nearest = INFINITY;
      for (double b : t.borders) nearest = std::min(nearest, std::abs(std::abs(xs[i]) - b));
      EXPECT_LT(nearest, 1e-5) << fn << " x=" << xs[i];
    }
    EXPECT_LT(differ, 5);
    EXPECT_EQ(store.live_count(), 2u);
  }
}

TEST(FewBitStore, AcceptsOnlyDerivativesAndMasks) {
  FewbitStore store;
  SaveRequest r;
  r.need = Need::Value;
  EXPECT_FALSE(store.accepts(r));
  EXPECT_THROW(store.save(Tensor::zeros({4}), r), Error);
  r.need = Need::Index;
  EXPECT_FALSE(store.accepts(r));
  r.need = Need::Mask;
  EXPECT_TRUE(store.accepts(r));
  r.exact = true;
  EXPECT_FALSE(store.accepts(r));
  r.exact = false;
  r.need = Need::Derivative;
  EXPECT_FALSE(store.accepts(r));  // no function
  r.fn = &pointwise_by_name("gelu");
  EXPECT_TRUE(store.accepts(r));
}

TEST(FewBitStore, MaskRoundTrip) {
  Tensor m = Tensor::empty({3, 16, 2, 3}, DType::u8);
  PhiloxStream s(81, 0);
  for (auto& v : m.span<uint8_t>()) v = s.uniform() < 0.4f ? 1 : 0;
  const Tensor mb = m.to_layout(Layout::nChw16c);
  FewbitStore store;
  SaveRequest r;
  r.need = Need::Mask;
  r.op = "dropout";
  auto h = store.save(mb, r);
  const Tensor back = store.load(h);
  EXPECT_EQ(back.dtype(), DType::u8);
  EXPECT_EQ(back.layout(), Layout::nChw16c);
  EXPECT_EQ(std::memcmp(back.raw(), mb.raw(), mb.nbytes()), 0);
  std::vector<SavedRecord> recs;
  store.describe(recs);
  EXPECT_EQ(recs[0].bytes, packed_bytes(m.numel(), 1));
  store.release(h);
  EXPECT_THROW(store.load(h), Error);
}

TEST(FewBitStore, FactoryReadsItsOptions) {
  {
    SchemeOptions o({{"bits", "2"}, {"weight", "normal"}, {"refine", "false"}}, "rules[0]");
    auto s = make_fewbit_store(o);
    auto* f = dynamic_cast<FewbitStore*>(s.get());
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(s->scheme(), "fewbit");
    EXPECT_EQ(f->options().bits, 2);
    EXPECT_EQ(f->options().table.weight, FewbitWeight::Normal);
    EXPECT_FALSE(f->options().table.refine);
  }
  {
    SchemeOptions o({}, "default");
    auto s = make_fewbit_store(o);
    EXPECT_EQ(dynamic_cast<FewbitStore*>(s.get())->options().bits, 3);
  }
  for (const char* bad : {"0", "5"}) {
    SchemeOptions o({{"bits", bad}}, "rules[1]");
    EXPECT_THROW(make_fewbit_store(o), Error) << bad;
  }
  SchemeOptions typo({{"bitz", "2"}}, "rules[2]");
  EXPECT_THROW(make_fewbit_store(typo), Error);
  EXPECT_THROW(FewbitStore({5, {}}), Error);
}

}  // namespace
}  // namespace packrat
