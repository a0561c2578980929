// Every op that saves tensors for backward registers the kinds it saves under
// (autograd/saving_op_kinds.h), so that a store rule may name each one: the ops run here with
// gradients wanted, and every SaveRequest::op they make is a kind a rule accepts.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "autograd/ops.h"
#include "autograd/ops/drop_path.h"
#include "autograd/pointwise.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gradcheck.h"
#include "tests/support/recording_policy.h"

namespace packrat {
namespace {

using testing::random_tensor;
using testing::RecordingPolicy;

Tensor input(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed);
  t.set_requires_grad(true);
  return t;
}

TEST(SavingOpKinds, EveryKindAnOpSavesUnderIsRegisteredAndAcceptedByRules) {
  RecordingPolicy policy;
  PolicyScope scope(policy);
  const Tensor x = input({2, 4, 6, 6}, 1), w = input({4, 4, 3, 3}, 2);
  Tensor h = ops::conv2d(x, w, Tensor(), {1, 1, 1, 1});
  Tensor mean = Tensor::zeros({4}), var = Tensor::full({4}, 1.0f);
  h = ops::batchnorm2d(h, input({4}, 3), input({4}, 4), mean, var, true);
  h = ops::relu(h);
  h = ops::maxpool2d(h, {2, 2, 2, 2, 0, 0});
  h = ops::mul(h, input({2, 4, 3, 3}, 5));
  h = ops::drop_path(h, 0.5f, true, 1, 2);
  h = ops::flatten(h);
  h = ops::dropout(h, 0.5f, true, 1, 3);
  h = ops::layernorm(h, input({36}, 6), input({36}, 7));
  h = ops::linear(h, input({8, 36}, 8), Tensor());
  h = ops::softmax(ops::matmul(h, input({8, 8}, 9)));
  const Tensor ids = Tensor::from_vector({2}, std::vector<double>{1.0, 3.0}).to(DType::i64);
  const Tensor e = ops::embedding(ids, input({5, 8}, 10));
  const Tensor q = ops::reshape(ops::add(h, e), {2, 1, 1, 8});
  ops::AttentionOptions o;
  o.dropout_p = 0.5f;
  o.training = true;
  h = ops::scaled_dot_product_attention(q, input({2, 1, 3, 8}, 11), input({2, 1, 3, 8}, 12), o);
  const Tensor loss =
      ops::cross_entropy(ops::reshape(h, {2, 8}), Tensor::from_vector({2}, std::vector<double>{0.0, 7.0}).to(DType::i64));

  const std::vector<std::string> kinds = registered_saving_op_kinds();
  const std::set<std::string> registered(kinds.begin(), kinds.end());
  std::set<std::string> seen;
  for (const SaveRequest& r : policy.store.requests) {
    seen.emplace(r.op);
    EXPECT_TRUE(is_op_kind(r.op)) << r.op << " is saved but a rule cannot name it";
    if (!is_pointwise_name(r.op)) {
      EXPECT_TRUE(registered.count(std::string(r.op))) << r.op << " is not registered by its op";
    }
  }
  for (const char* k : {"conv2d", "batchnorm2d", "maxpool2d", "mul", "drop_path", "dropout", "layernorm", "linear",
                        "matmul", "softmax", "embedding", "attention_q", "attention_k", "attention_v",
                        "attention_softmax", "attention_dropout", "cross_entropy"})
    EXPECT_TRUE(seen.count(k)) << k << " was not saved by the ops run here";
  backward(loss);  // releases every saved tensor while the recording store still lives
  EXPECT_EQ(policy.store.live_count(), 0u);
}

}  // namespace
}  // namespace packrat
