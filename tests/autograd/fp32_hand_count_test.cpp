// The FP32 store's bytes for a small network, counted by hand from what each op must keep.
#include <gtest/gtest.h>

#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tests/support/gradcheck.h"

using namespace packrat;

TEST(Fp32HandCount, SmallNetworkHoldsExactlyWhatBackwardNeeds) {
  clear_tape();
  Tensor conv_w, bn_w, bn_b, fc_w;
  {
    TagScope parameters(MemTag::Parameter);
    conv_w = packrat::testing::random_tensor({16, 3, 3, 3}, 1).set_requires_grad();
    bn_w = Tensor::full({16}, 1.0f).set_requires_grad();
    bn_b = Tensor::zeros({16}).set_requires_grad();
    fc_w = packrat::testing::random_tensor({10, 256}, 2, -0.05f, 0.05f).set_requires_grad();
  }
  Tensor mean = Tensor::zeros({16}), var = Tensor::full({16}, 1.0f);
  Tensor x = packrat::testing::random_tensor({2, 3, 8, 8}, 3);  // (N, C, H, W), needs no gradient
  Tensor labels = Tensor::zeros({2}, DType::i64);

  Fp32Policy policy;
  PolicyScope scope(policy);
  const int64_t base = Allocator::cpu().current(MemTag::Saved);
  ops::Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  Tensor h = ops::conv2d(x, conv_w, Tensor(), co);                       // (2, 16, 8, 8)
  h = ops::batchnorm2d(h, bn_w, bn_b, mean, var, /*training=*/true);     // (2, 16, 8, 8)
  h = ops::relu(h);                                                      // (2, 16, 8, 8)
  h = ops::maxpool2d(h, ops::Pool2dOptions{2, 2, 2, 2});                 // (2, 16, 4, 4)
  Tensor loss = ops::cross_entropy(ops::linear(ops::flatten(h), fc_w, Tensor()), labels);

  const int64_t expected = 2 * 3 * 8 * 8 * 4     // conv2d: its input (the weight is the parameter itself)
                           + 2 * 16 * 8 * 8 * 4  // batchnorm2d: its input
                           + 2 * 16 * 4          // batchnorm2d: batch mean and variance
                           + 2 * 16 * 8 * 8 * 4  // relu: its output
                           + 2 * 16 * 4 * 4      // maxpool2d: argmax within each 2x2 window, one byte each
                           + 2 * 256 * 4         // linear: its (flattened) input
                           + 2 * 10 * 4          // cross_entropy: the probabilities
                           + 2 * 8;              // cross_entropy: the targets (i64)
  int64_t described = 0;
  for (const auto& r : policy.describe()) described += r.bytes;
  EXPECT_EQ(described, expected);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved) - base, expected);
  backward(loss);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), base);
}
