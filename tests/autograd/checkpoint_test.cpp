// The checkpoint primitive (autograd/checkpoint.h): a segment keeps only its inputs, through the
// store, and its backward recomputes it, giving the gradients of a run without recomputation to
// the bit, in the gradient-ready order of that run, and leaving nothing behind.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::message_of;
using packrat::testing::random_tensor;

namespace {

struct Mlp {
  Tensor w1 = random_tensor({16, 8}, 11).set_requires_grad(true);
  Tensor b1 = random_tensor({16}, 12).set_requires_grad(true);
  Tensor w2 = random_tensor({8, 16}, 13).set_requires_grad(true);
  // x + w2 gelu(w1 x + b1): a residual block of linear layers.
  Tensor block(const Tensor& x) const {
    return ops::add(x, ops::linear(ops::gelu(ops::linear(x, w1, b1)), w2, Tensor()));
  }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  void zero_grad() {
    for (Tensor p : params()) p.zero_grad();
  }
};

// A scalar of y (N, 8): cross-entropy against fixed classes.
Tensor loss_of(const Tensor& y) {
  Tensor classes = Tensor::zeros({y.dim(0)}, DType::i64);
  for (int64_t i = 0; i < y.dim(0); ++i) classes.data<int64_t>()[i] = (3 * i + 1) % y.dim(1);
  return ops::cross_entropy(y, classes);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector(), vb = b.to_vector();
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// loss of two blocks, the second one checkpointed when `recompute`.
Tensor two_blocks(const Mlp& a, const Mlp& b, const Tensor& x, bool recompute) {
  Tensor h = a.block(x);
  LayerScope layer("blocks.1");
  Tensor y = recompute ? checkpoint([&b](const Tensor& in) { return b.block(in); }, h) : b.block(h);
  return loss_of(y);
}

}  // namespace

TEST(CheckpointSegment, GradientsAreTheBitsOfARunWithoutRecomputation) {
  clear_tape();
  Mlp a, b;
  const Tensor x = random_tensor({4, 8}, 1).set_requires_grad(true);
  std::vector<Tensor> plain;
  for (bool recompute : {false, true}) {
    a.zero_grad();
    b.zero_grad();
    x.autograd_meta()->grad = Tensor();
    const Tensor loss = two_blocks(a, b, x, recompute);
    backward(loss);
    std::vector<Tensor> grads = {loss, x.grad()};
    for (const Mlp* m : {&a, &b})
      for (const Tensor& p : m->params()) grads.push_back(p.grad());
    if (!recompute) {
      plain = grads;
      continue;
    }
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(same_bits(grads[i], plain[i])) << "tensor " << i;
  }
}

TEST(CheckpointSegment, KeepsOnlyTheSegmentInputThroughTheStoreAndNothingAfterTheStep) {
  clear_tape();
  Mlp b;
  Fp32Policy policy;
  PolicyScope scope(policy);
  const Tensor x = random_tensor({4, 8}, 2).set_requires_grad(true);
  const int64_t activation_before = Allocator::cpu().current(MemTag::Activation);
  Tensor loss;
  {
    TagScope tag(MemTag::Activation);
    const Tensor h = ops::scale(x, 2.0f);  // not a leaf: what a segment normally gets
    LayerScope layer("blocks.0");
    const Tensor y = checkpoint([&b](const Tensor& in) { return b.block(in); }, h);
    loss = loss_of(y);
  }
  // The segment's input, and the loss's probabilities: nothing of the segment's linears or GELU.
  std::vector<SavedRecord> records = policy.describe();
  EXPECT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].op, "checkpoint");
  EXPECT_EQ(records[0].layer, "blocks.0");
  EXPECT_EQ(records[0].bytes, 4 * 8 * 4);
  for (size_t i = 1; i < records.size(); ++i) EXPECT_EQ(records[i].op, "cross_entropy");
  reset_recompute_stats();
  backward(loss);
  EXPECT_EQ(recompute_stats().recomputes, 1);
  EXPECT_GT(recompute_stats().peak_bytes, 0);
  loss = Tensor();
  EXPECT_EQ(policy.describe().size(), 0u);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), 0);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Activation), activation_before);
  for (const Tensor& p : b.params()) EXPECT_TRUE(p.grad().defined());
}

TEST(CheckpointSegment, TheGradientReadyHookFiresInTheOrderOfARunWithoutRecomputation) {
  clear_tape();
  Mlp a, b;
  const Tensor x = random_tensor({4, 8}, 3);
  std::vector<std::vector<const AutogradMeta*>> orders;
  for (bool recompute : {false, true}) {
    std::vector<const AutogradMeta*> order;
    set_gradient_ready_hook([&order](AutogradMeta& leaf) {
      order.push_back(&leaf);
      EXPECT_TRUE(leaf.grad.defined());
    });
    backward(two_blocks(a, b, x, recompute));
    set_gradient_ready_hook({});
    orders.push_back(order);
    a.zero_grad();
    b.zero_grad();
  }
  EXPECT_EQ(orders[0].size(), 6u);
  EXPECT_EQ(orders[1], orders[0]);
}

TEST(CheckpointSegment, ASecondBackwardOrAnInputChangedInPlaceThrowsNamingTheSegment) {
  clear_tape();
  Mlp b;
  const Tensor x = random_tensor({4, 8}, 4).set_requires_grad(true);
  {
    const Tensor h = ops::scale(x, 1.0f);
    LayerScope layer("blocks.3");
    const Tensor y = checkpoint([&b](const Tensor& in) { return b.block(in); }, h);
    backward(y, Tensor::full(y.shape(), 1.0f));
    const std::string m = message_of([&] { backward(y, Tensor::full(y.shape(), 1.0f)); });
    EXPECT_NE(m.find("checkpoint blocks.3"), std::string::npos) << m;
  }
  {
    Tensor h = ops::scale(x, 1.0f);
    LayerScope layer("blocks.4");
    const Tensor y = checkpoint([&b](const Tensor& in) { return b.block(in); }, h);
    h.bump_version();  // what an in-place op does
    const std::string m = message_of([&] { backward(y, Tensor::full(y.shape(), 1.0f)); });
    EXPECT_NE(m.find("checkpoint blocks.4"), std::string::npos) << m;
    EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
  }
  clear_tape();
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), 0);
}

TEST(CheckpointSegment, NestedAndMultiOutputSegmentsAndOnesThatPassAnInputThrough) {
  clear_tape();
  Mlp a, b;
  const Tensor x = random_tensor({4, 8}, 5).set_requires_grad(true);
  // (u, v) = (b(a(x)), x): an inner segment inside an outer one, and an output that is an input.
  auto run = [&](bool recompute) {
    Segment inner = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{b.block(in[0])}; };
    Segment outer = [&](const std::vector<Tensor>& in) {
      Tensor h = a.block(in[0]);
      Tensor u = recompute ? checkpoint(inner, {h})[0] : inner({h})[0];
      return std::vector<Tensor>{u, in[0]};
    };
    std::vector<Tensor> out = recompute ? checkpoint(outer, {x}) : outer({x});
    return ops::add(loss_of(out[0]), loss_of(ops::mul(out[1], out[1])));
  };
  std::vector<Tensor> plain;
  for (bool recompute : {false, true}) {
    a.zero_grad();
    b.zero_grad();
    x.autograd_meta()->grad = Tensor();
    reset_recompute_stats();
    backward(run(recompute));
    std::vector<Tensor> grads = {x.grad()};
    for (const Mlp* m : {&a, &b})
      for (const Tensor& p : m->params()) grads.push_back(p.grad());
    if (!recompute) {
      plain = grads;
      continue;
    }
    EXPECT_EQ(recompute_stats().recomputes, 2);
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(same_bits(grads[i], plain[i])) << "tensor " << i;
  }
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), 0);
}

TEST(CheckpointSegment, WithoutGradOrWithoutAnythingToDifferentiateItOnlyRunsTheSegment) {
  clear_tape();
  Mlp b;
  const Tensor x = random_tensor({4, 8}, 6);
  {
    NoGradScope no_grad;
    const Tensor y = checkpoint([&b](const Tensor& in) { return b.block(in); }, x);
    EXPECT_FALSE(y.requires_grad());
  }
  const Tensor z = checkpoint([](const Tensor& in) { return ops::scale(in, 2.0f); }, x);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(tape_size(), 0u);
}
