// The tape itself: accumulation, one backward per forward, in-place detection, saved handles
// released node by node, determinism, a tensor saved twice held once, no leaks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "tests/support/gradcheck.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;
using packrat::testing::random_tensor;

namespace {

// An identity op (a copy) whose backward records the Saved bytes at the moment it runs.
Tensor probe(const Tensor& x, std::vector<int64_t>* saved_bytes) {
  Tensor y = x.clone();
  record("probe", {&x}, {&y}, {}, [saved_bytes](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
    saved_bytes->push_back(Allocator::cpu().current(MemTag::Saved));
    return {g[0]};
  });
  return y;
}

}  // namespace

TEST(Tape, GradientsAccumulateWhenATensorIsUsedTwice) {
  clear_tape();
  Tensor x = random_tensor({6}, 1).set_requires_grad(true);
  // Leaf used three times: d/dx (x*x + 3x) = 2x + 3.
  Tensor y = ops::add(ops::mul(x, x), ops::scale(x, 3.0f));
  backward(y, Tensor::full({6}, 1.0f));
  const auto vx = x.to_vector(), gx = x.grad().to_vector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_FLOAT_EQ(gx[i], 2 * vx[i] + 3);

  // Non-leaf used twice: z = h + h*h, h = gelu(x) -> dz/dx = gelu'(x) (1 + 2h).
  x.zero_grad();
  Tensor h = ops::gelu(x);
  const auto vh = h.to_vector();
  Tensor z = ops::add(h, ops::mul(h, h));
  backward(z, Tensor::full({6}, 1.0f));
  const Pointwise& fn = pointwise_by_name("gelu");
  const auto g2 = x.grad().to_vector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_NEAR(g2[i], fn.df(vx[i]) * (1 + 2 * vh[i]), 1e-6);
}

TEST(Tape, ASecondBackwardThrowsSayingSo) {
  clear_tape();
  Tensor x = random_tensor({3, 4}, 2).set_requires_grad(true);
  Tensor t = Tensor::zeros({3}, DType::i64);
  Tensor loss = ops::cross_entropy(ops::gelu(x), t);
  backward(loss);
  const std::string m = message_of([&] { backward(loss); });
  EXPECT_NE(m.find("second time"), std::string::npos) << m;
  EXPECT_NE(m.find("already released"), std::string::npos) << m;
  EXPECT_NE(m.find("(by cross_entropy"), std::string::npos) << m;  // names the op whose graph was consumed
}

TEST(Tape, LoadingATensorModifiedInPlaceThrowsNamingTheOp) {
  clear_tape();
  LayerScope layer("block2");
  Tensor x = random_tensor({5}, 3).set_requires_grad(true);
  Tensor y = ops::activation(x, "silu");  // saves x
  x.bump_version();         // an in-place update after the save
  const std::string m = message_of([&] { backward(y, Tensor::full({5}, 1.0f)); });
  EXPECT_NE(m.find("silu block2"), std::string::npos) << m;
  EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
  clear_tape();
}

TEST(Tape, SavedHandlesAreReleasedRightAfterEachNodesBackward) {
  clear_tape();
  Fp32Policy policy;
  PolicyScope scope(policy);
  const int64_t base = Allocator::cpu().current(MemTag::Saved);
  const int64_t bytes = 64 * 4;
  std::vector<int64_t> seen;
  Tensor x = random_tensor({64}, 4).set_requires_grad(true);
  {
    Tensor a = ops::gelu(x);                          // saves x
    Tensor b = ops::gelu(probe(a, &seen));            // saves the probe's copy of a
    Tensor c = ops::gelu(probe(b, &seen));            // saves the probe's copy of b
    EXPECT_EQ(Allocator::cpu().current(MemTag::Saved) - base, 3 * bytes);
    backward(c, Tensor::full({64}, 1.0f));
    EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), base);
  }
  // The second probe runs after c's node released one tensor, the first after b's released another.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0] - base, 2 * bytes);
  EXPECT_EQ(seen[1] - base, 1 * bytes);
}

TEST(Tape, Fp32StoreRunTwiceGivesBitIdenticalGradients) {
  clear_tape();
  auto run = [] {
    Fp32Policy policy;
    PolicyScope scope(policy);
    Tensor x = random_tensor({8, 40}, 5).set_requires_grad(true);
    Tensor w = random_tensor({40}, 6, 0.5f, 1.5f).set_requires_grad(true);
    Tensor b = random_tensor({40}, 7).set_requires_grad(true);
    Tensor t = Tensor::zeros({8}, DType::i64);
    for (int i = 0; i < 8; ++i) t.data<int64_t>()[i] = (i * 7) % 40;
    Tensor h = ops::gelu(ops::layernorm(x, w, b));
    h = ops::dropout(h, 0.25f, true, 99, 1);
    h = ops::mul(ops::softmax(h), ops::activation(h, "silu"));
    backward(ops::cross_entropy(ops::scale(h, 10.0f), t, 0.1f));
    std::vector<float> g;
    for (const Tensor* p : {&x, &w, &b}) {
      auto v = p->grad().to_vector();
      g.insert(g.end(), v.begin(), v.end());
    }
    return g;
  };
  const auto g1 = run(), g2 = run();
  ASSERT_EQ(g1.size(), g2.size());
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
  bool nonzero = false;
  for (float v : g1) nonzero = nonzero || v != 0.0f;
  EXPECT_TRUE(nonzero);
}

TEST(Tape, ATensorSavedByTwoOpsIsHeldOnce) {
  clear_tape();
  Fp32Policy policy;
  PolicyScope scope(policy);
  const int64_t base = Allocator::cpu().current(MemTag::Saved);
  Tensor x = random_tensor({32}, 8).set_requires_grad(true);
  Tensor h = ops::scale(x, 2.0f);  // saves nothing
  Tensor a = ops::gelu(h);         // saves h
  Tensor b = ops::activation(h, "silu");         // saves h again
  auto rec = policy.describe();
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_EQ(rec[0].shared + rec[1].shared, 1);
  EXPECT_EQ(rec[0].bytes + rec[1].bytes, 32 * 4);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved) - base, 32 * 4);
  backward(ops::add(a, b), Tensor::full({32}, 1.0f));
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), base);
  const auto gx = x.grad().to_vector(), vx = x.to_vector();
  const Pointwise &ge = pointwise_by_name("gelu"), &si = pointwise_by_name("silu");
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_NEAR(gx[i], 2 * (ge.df(2 * vx[i]) + si.df(2 * vx[i])), 1e-5);
}

TEST(Tape, ActivationAndSavedTagsAreBackToZeroAfterBackward) {
  clear_tape();
  auto& alloc = Allocator::cpu();
  const int64_t act0 = alloc.current(MemTag::Activation), saved0 = alloc.current(MemTag::Saved);
  Tensor w;
  {
    TagScope tag(MemTag::Parameter);
    w = random_tensor({16}, 9).set_requires_grad(true);
  }
  {
    Tensor x = random_tensor({4, 16}, 10);
    Tensor t = Tensor::zeros({4}, DType::i64);
    Tensor ids = Tensor::zeros({4, 2}, DType::i64);
    Tensor h = ops::layernorm(x, w, Tensor());
    h = ops::relu(ops::dropout(ops::gelu(h), 0.5f, true, 1, 2));
    h = ops::transpose_last2(ops::reshape(h, {4, 4, 4}));
    Tensor loss = ops::cross_entropy(ops::flatten(ops::softmax(h)), t);
    EXPECT_GT(alloc.current(MemTag::Saved), saved0);
    backward(loss);
    EXPECT_EQ(alloc.current(MemTag::Saved), saved0);
  }
  EXPECT_EQ(alloc.current(MemTag::Activation), act0);
  EXPECT_EQ(alloc.current(MemTag::Saved), saved0);
  EXPECT_TRUE(w.grad().defined());
}
