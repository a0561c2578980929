// The backend test, dropout and embedding section: dropout masks against Philox computed
// element by element (the same streams on every backend, bit for bit), their statistics and
// determinism, masked scaling, the Philox fills of init, embedding gather / scatter-add.
#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

std::vector<float> as_floats(const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); }

// Element i = 256 b + r keeps where word r / 64 of Philox(seed, stream, 64 b + r % 64) is >= p.
bool kept(int64_t i, float p, uint64_t seed, uint64_t stream) {
  const int64_t b = i / 256, r = i % 256;
  uint32_t w[4];
  Philox4x32::generate(seed, stream, static_cast<uint64_t>(64 * b + r % 64), w);
  return Philox4x32::to_uniform(w[r / 64]) >= p;
}

TEST(BackendRandom, DropoutMasksAreThePhiloxStreamsBitForBit) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    const Tensor hx = host_random({1000, 7}, 9);  // not a multiple of the 256-element block
    const std::vector<float> xv = hx.to_vector();
    const Tensor x = hx.to(b->device());
    Tensor mask;
    const Tensor y = b->dropout_forward(x, p, scale, 1234, 5, &mask);
    ASSERT_TRUE(mask.defined());
    EXPECT_EQ(mask.dtype(), DType::u8);
    const std::vector<float> yv = host_values(y), mv = as_floats(mask);
    int64_t keep = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const bool k = kept(static_cast<int64_t>(i), p, 1234, 5);
      ASSERT_EQ(mv[i], k ? 1.0f : 0.0f) << "element " << i;
      ASSERT_EQ(yv[i], k ? xv[i] * scale : 0.0f) << "element " << i;
      keep += k;
    }
    // About 1 - p kept (7000 Bernoulli draws: sd 0.0055).
    EXPECT_NEAR(static_cast<double>(keep) / xv.size(), 1.0 - p, 0.03);
    // Deterministic: the same (seed, stream) gives the same mask, without saving it too.
    EXPECT_EQ(host_values(b->dropout_forward(x, p, scale, 1234, 5, nullptr)), yv);
    Tensor other;
    b->dropout_forward(x, p, scale, 1234, 6, &other);
    EXPECT_NE(as_floats(other), mv);
    // Blocked layout: the mask follows the buffer as it lies, and comes back in x's layout.
    const Tensor hb = host_random({2, 32, 3, 5}, 10);
    Tensor bm;
    const Tensor yb = b->dropout_forward(b->to_layout(hb.to(b->device()), Layout::nChw16c), p, scale, 7, 8, &bm);
    EXPECT_EQ(yb.layout(), Layout::nChw16c);
    EXPECT_EQ(bm.layout(), Layout::nChw16c);

    // mask_scale: mask ? g * scale : 0.
    const Tensor hg = host_random({1000, 7}, 11);
    const std::vector<float> gv = hg.to_vector();
    const std::vector<float> got = host_values(b->mask_scale(hg.to(b->device()), mask, scale));
    for (size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(got[i], mv[i] != 0 ? gv[i] * scale : 0.0f) << i;
  }
}

TEST(BackendRandom, UniformAndNormalFillsArePhiloxBlocks) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    Tensor u = Tensor::empty({10, 3});
    EXPECT_EQ(b->fill_uniform(u, -1.0f, 3.0f, 42, 7, 100), 8);  // 30 values: 8 blocks of 4
    const std::vector<float> uv = host_values(u);
    for (int64_t i = 0; i < 30; ++i) {
      uint32_t w[4];
      Philox4x32::generate(42, 7, 100 + static_cast<uint64_t>(i / 4), w);
      ASSERT_EQ(uv[i], -1.0f + 4.0f * Philox4x32::to_uniform(w[i % 4])) << i;
    }
    Tensor n = Tensor::empty({20000});
    EXPECT_EQ(b->fill_normal(n, 1.0f, 2.0f, 42, 8, 0), 5000);
    double s = 0, sq = 0;
    for (float v : host_values(n)) {
      s += v;
      sq += static_cast<double>(v) * v;
    }
    const double mean = s / 20000, var = sq / 20000 - mean * mean;
    EXPECT_NEAR(mean, 1.0, 0.05);
    EXPECT_NEAR(std::sqrt(var), 2.0, 0.05);
  }
}

TEST(BackendRandom, EmbeddingGathersAndScatterAddsRows) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t num = 5, D = 3;
    const Tensor hw = host_random({num, D}, 12);
    const std::vector<float> wv = hw.to_vector();
    const std::vector<int64_t> idv{4, 0, 4, 2, 2, 2};
    Tensor ids;
    {
      DeviceScope on_cpu(Device::cpu());
      ids = Tensor::empty({2, 3}, DType::i64);
      for (size_t i = 0; i < idv.size(); ++i) ids.data<int64_t>()[i] = idv[i];
    }
    const Tensor y = b->embedding_forward(hw.to(b->device()), ids.to(b->device()));
    EXPECT_EQ(y.shape(), Shape({2, 3, D}));
    std::vector<float> want;
    for (int64_t id : idv)
      for (int64_t j = 0; j < D; ++j) want.push_back(wv[id * D + j]);
    EXPECT_EQ(host_values(y), want);

    const Tensor hg = host_random({2, 3, D}, 13);
    const std::vector<float> gv = hg.to_vector();
    std::vector<double> gw(num * D, 0.0);
    for (size_t i = 0; i < idv.size(); ++i)
      for (int64_t j = 0; j < D; ++j) gw[idv[i] * D + j] += gv[i * D + j];
    const Tensor got = b->embedding_backward(hg.to(b->device()), ids.to(b->device()), num);
    EXPECT_EQ(got.shape(), Shape({num, D}));
    expect_close(host_values(got), std::vector<float>(gw.begin(), gw.end()), 1e-6f, 1e-7f, "embedding backward");

    Tensor bad = ids.clone();
    bad.data<int64_t>()[4] = 5;
    EXPECT_NE(testing::message_of([&] { b->embedding_forward(hw.to(b->device()), bad.to(b->device())); })
                  .find("id 5 at position 4 is out of range [0, 5)"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace packrat
