// GACT: the greedy allocator (budget, preference for sensitive tensors, errors), both
// sensitivity estimators on a toy network with one deliberately sensitive tensor, the
// warning against the sampling variance, the CSV log, config and presets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>

#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/error.h"
#include "quant/group/gact_store.h"
#include "quant/policy/presets.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/gact_toy.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::random_tensor;
using testing::GactState;
using testing::same_state;
using testing::toy_options;
using testing::ToyNet;

double avg_bits(const std::vector<int>& b, const std::vector<int64_t>& n) {
  double s = 0, t = 0;
  for (size_t i = 0; i < b.size(); ++i) s += static_cast<double>(b[i]) * n[i], t += static_cast<double>(n[i]);
  return s / t;
}

TEST(GactAllocator, StaysWithinBudgetAndFavoursSensitiveTensors) {
  const std::vector<int> cand = {1, 2, 3, 4, 8};
  const std::vector<int64_t> n = {1000, 1000, 1000, 1000};
  const auto b = allocate_bits({1.0, 1000.0, 1.0, 1.0}, n, 3.0, cand);
  EXPECT_LE(avg_bits(b, n), 3.0);
  EXPECT_GT(b[1], b[0]);
  EXPECT_GT(b[1], b[2]);
  EXPECT_GT(b[1], b[3]);
  EXPECT_EQ(allocate_bits({1, 2}, {10, 10}, 8.0, cand), (std::vector<int>{8, 8}));
  EXPECT_EQ(allocate_bits({1, 2}, {10, 10}, 1.0, cand), (std::vector<int>{1, 1}));
  // Random instances: never over budget, and no single upgrade that fits would lower the variance
  // by more per bit than the least efficient upgrade taken... at least: budget respected and
  // more sensitive tensors of equal size never get fewer bits.
  PhiloxStream s(1, 2);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> c;
    std::vector<int64_t> m;
    for (int l = 0; l < 12; ++l) {
      c.push_back(std::pow(10.0, 4 * s.uniform()));
      m.push_back(4096);
    }
    const double budget = 1.0 + 5.0 * s.uniform();
    const auto bits = allocate_bits(c, m, budget, cand);
    EXPECT_LE(avg_bits(bits, m), budget + 1e-9);
    for (size_t i = 0; i < c.size(); ++i)
      for (size_t j = 0; j < c.size(); ++j)
        if (c[i] > c[j]) {
          EXPECT_GE(bits[i], bits[j]) << "trial " << trial;
        }
  }
  EXPECT_THROW(allocate_bits({1}, {10}, 0.5, cand), Error);
}

TEST(GactMeasured, SensitiveTensorGetsMoreBits) {
  ToyNet net;
  GactPolicy policy(toy_options(GactEstimator::Measured));
  GactStore& g = policy.gact();
  auto fn = [&] { return net.grads(policy); };
  policy.begin_step(0);
  ASSERT_TRUE(g.refresh(0, fn));
  ASSERT_EQ(g.tensors().size(), 2u);
  EXPECT_EQ(g.last_refresh_passes(), 3);  // one shared baseline + one per tensor
  const auto& t = g.tensors();
  EXPECT_EQ(t[0].numel, 16 * 64);
  EXPECT_TRUE(t[0].estimated && t[1].estimated);
  const double ratio = t[1].sensitivity / t[0].sensitivity;
  EXPECT_GT(ratio, 200.0);
  EXPECT_LT(ratio, 4000.0);
  EXPECT_GT(t[1].bits, t[0].bits);
  EXPECT_LE(g.average_bits(), 3.0);
  // The next steps quantize with the assigned bits; the describe() report shows them.
  policy.begin_step(1);
  EXPECT_FALSE(g.refresh(1, fn));  // not due
  {
    PolicyScope scope(policy);
    Tensor y = ops::linear(net.xa, net.wa, Tensor());
    Tensor z = ops::linear(net.xb, net.wb, Tensor());
    const auto recs = policy.describe();
    ASSERT_EQ(recs.size(), 2u);  // the two inputs (weights go to the parameter pass-through store)
    int found = 0;
    for (const auto& r : recs)
      if (r.scheme == "gact") {
        EXPECT_EQ(r.bits, t[static_cast<size_t>(found)].bits);
        EXPECT_EQ(r.bytes, group_geometry(16 * 64, 16, [&] {
                             GroupQuantConfig c;
                             c.bits = t[static_cast<size_t>(found)].bits;
                             c.group_size = 64;
                             return c;
                           }()).total_bytes());
        ++found;
      }
    EXPECT_EQ(found, 2);
    clear_tape();
  }
  policy.begin_step(10);
  EXPECT_TRUE(g.refresh(10, fn));  // due again
  EXPECT_EQ(g.refreshes(), 2);
}

// Relative units weigh each row's noise against its own gradient: the toy's 30x amplification of
// xb's branch scales Wb's gradient and its noise alike, so the two inputs weigh about the same
// (absolute: ~900x apart, above).
TEST(GactMeasured, RelativeVarianceWeighsNoiseAgainstEachRowsGradient) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  o.variance = GactVariance::Relative;
  GactPolicy policy(o);
  GactStore& g = policy.gact();
  EXPECT_TRUE(g.relative_variance());
  policy.begin_step(0);
  ASSERT_TRUE(g.refresh(0, [&] { return net.grads(policy); }));
  ASSERT_EQ(g.tensors().size(), 2u);
  const double ratio = g.tensors()[1].sensitivity / g.tensors()[0].sensitivity;
  EXPECT_GT(ratio, 0.2);
  EXPECT_LT(ratio, 5.0);
  // auto: absolute until the trainer says the optimizer normalises its updates.
  GactPolicy automatic(toy_options(GactEstimator::Measured));
  EXPECT_FALSE(automatic.gact().relative_variance());
  automatic.gact().set_update_normalised(true);
  EXPECT_TRUE(automatic.gact().relative_variance());
  GactOptions absolute = toy_options(GactEstimator::Measured);
  absolute.variance = GactVariance::Absolute;
  GactPolicy fixed(absolute);
  fixed.gact().set_update_normalised(true);
  EXPECT_FALSE(fixed.gact().relative_variance());
}

TEST(GactMeasured, AdaptWarmupDoublesTheIntervalUpToAdaptInterval) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);  // adapt_interval 10
  o.adapt_warmup = true;
  GactPolicy policy(o);
  std::vector<int64_t> refreshed;
  for (int64_t step = 0; step <= 40; ++step) {
    policy.begin_step(step);
    if (policy.gact().refresh(step, [&] { return net.grads(policy); })) refreshed.push_back(step);
  }
  EXPECT_EQ(refreshed, (std::vector<int64_t>{0, 1, 3, 7, 15, 25, 35}));
}

TEST(GactMeasured, RoundRobinSubsetIsCheaper) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  o.tensors_per_refresh = 1;
  o.adapt_interval = 1;
  GactPolicy policy(o);
  auto fn = [&] { return net.grads(policy); };
  policy.begin_step(0);
  ASSERT_TRUE(policy.gact().refresh(0, fn));
  EXPECT_EQ(policy.gact().last_refresh_passes(), 2);
  EXPECT_TRUE(policy.gact().tensors()[0].estimated);
  EXPECT_FALSE(policy.gact().tensors()[1].estimated);
  policy.begin_step(1);
  ASSERT_TRUE(policy.gact().refresh(1, fn));
  EXPECT_TRUE(policy.gact().tensors()[1].estimated);
  EXPECT_GT(policy.gact().tensors()[1].bits, policy.gact().tensors()[0].bits);
}

// linear(x, W0) -> [checkpoint: segment(., W1)]: a recomputed segment's input.
struct SegmentNet {
  using Body = std::function<Tensor(const Tensor& in, const Tensor& w1)>;
  Tensor x = random_tensor({16, 32}, 11);       // (N, 32)
  Tensor w0 = ToyNet::param({64, 32}, 12);      // (64, 32)
  Tensor w1 = ToyNet::param({8, 64}, 13);       // (8, 64)
  Tensor seed = random_tensor({16, 8}, 14);     // (N, 8)
  Body body;
  std::vector<Tensor> grads(StorePolicy& policy) {
    PolicyScope scope(policy);
    w0.zero_grad();
    w1.zero_grad();
    const Tensor a = ops::linear(x, w0, Tensor());  // (N, 64), the segment's input
    const Tensor y = checkpoint([&](const Tensor& in) { return body(in, w1); }, a);
    backward(y, seed);
    return {w0.grad().clone(), w1.grad().clone()};
  }
};

double squared_distance(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const auto u = a[k].to_vector(), v = b[k].to_vector();
    for (size_t i = 0; i < u.size(); ++i) d += (double(u[i]) - v[i]) * (double(u[i]) - v[i]);
  }
  return d;
}

// Only the segment's input goes to gact (every other save is FP32), so "the input exact" is the
// FP32 run: its sensitivity times S(b) is the squared distance of the baseline's gradient to it.
TEST(GactMeasured, ASegmentInputIsMeasuredAgainstItsExactValue) {
  SegmentNet net;
  net.body = [](const Tensor& in, const Tensor& w1) { return ops::linear(ops::gelu(in), w1, Tensor()); };
  StorePolicySpec spec;
  StoreRule rule;
  rule.ops = {"checkpoint"};
  rule.spec.scheme = "gact";
  rule.spec.options = {{"avg_bits", "2"}, {"max_bits", "8"}, {"group_size", "64"}, {"adapt_interval", "10"}};
  spec.rules.push_back(rule);
  RulePolicy policy(spec);
  ASSERT_EQ(find_gact_stores(policy).size(), 1u);
  GactStore& g = *find_gact_stores(policy)[0];
  policy.begin_step(0);
  ASSERT_TRUE(g.refresh(0, [&] { return net.grads(policy); }));
  ASSERT_EQ(g.tensors().size(), 1u);
  EXPECT_EQ(g.tensors()[0].op, "checkpoint");
  EXPECT_EQ(g.last_refresh_passes(), 2);  // the baseline, then the input exact
  EXPECT_EQ(g.tensors()[0].bits, 2);      // one tensor: the whole budget
  // The baseline again (same step, same noise), and the exact input's gradients.
  policy.begin_step(0);
  const std::vector<Tensor> g0 = net.grads(policy);
  Fp32Policy fp32;
  const double d = squared_distance(g0, net.grads(fp32));
  ASSERT_GT(d, 0.0);
  EXPECT_NEAR(g.tensors()[0].sensitivity * quant_variance_factor(2), d, 1e-4 * d);
}

// Every tensor under gact, and the segment's first op saving the input it is given (linear): the
// recompute decodes the input into a buffer of its own, and the linear's save of that buffer is
// the segment's input again (held once, as its codes: compressing_store.h), not a tensor of its
// own; so the input's exact pass gives the linear the exact input too. Nearest rounding, so that
// "the rest as in the baseline" is a run of another policy: ActNN at 2 bits everywhere but the
// segment's input, in FP32 for the checkpoint and for the linear that reads it.
TEST(GactMeasured, ASegmentInputsExactPassHoldsItExactForTheOpThatSavesItAgain) {
  SegmentNet net;
  net.body = [](const Tensor& in, const Tensor& w1) {
    const LayerScope segment("segment");
    return ops::gelu(ops::linear(in, w1, Tensor()));
  };
  GactOptions o = toy_options(GactEstimator::Measured);
  o.avg_bits = 2;
  o.store.quant.rounding = Rounding::Nearest;
  GactPolicy policy(o);
  GactStore& g = policy.gact();
  policy.begin_step(0);
  ASSERT_TRUE(g.refresh(0, [&] { return net.grads(policy); }));
  // x, the segment's input (also the recompute's linear input), then in backward gelu's input.
  ASSERT_EQ(g.tensors().size(), 3u);
  ASSERT_EQ(g.tensors()[1].op, "checkpoint");
  EXPECT_EQ(g.tensors()[2].op, "gelu");
  policy.begin_step(1);
  StorePolicySpec spec;
  spec.default_scheme.scheme = "actnn";
  spec.default_scheme.options = {{"bits", "2"}, {"group_size", "64"}, {"rounding", "nearest"}};
  RulePolicy baseline(spec);
  for (const char* op : {"checkpoint", "linear"}) {
    StoreRule exact_input;
    exact_input.ops = {op};
    if (std::string(op) == "linear") exact_input.layers = {"segment"};
    exact_input.spec.scheme = "fp32";
    spec.rules.push_back(exact_input);
  }
  RulePolicy reference(spec);
  const double d = squared_distance(net.grads(baseline), net.grads(reference));
  ASSERT_GT(d, 0.0);
  EXPECT_NEAR(g.tensors()[1].sensitivity * quant_variance_factor(2), d, 1e-4 * d);
}

// x -> linear(., W0) -> [segment: gelu(linear(gelu(linear(., W1)), W1))] -> [the same with W2]:
// the forward saves x and the two segments' inputs; each recompute saves its gelus' inputs and its
// second linear's, in the backward (the second segment's first). Its first linear's input is the
// segment's input again (held once: compressing_store.h).
struct TwoSegmentNet {
  Tensor x = random_tensor({16, 64}, 21);       // (N, 64)
  Tensor w0 = ToyNet::param({64, 64}, 22);      // (64, 64)
  Tensor w1 = ToyNet::param({64, 64}, 23);      // (64, 64)
  Tensor w2 = ToyNet::param({64, 64}, 24);      // (64, 64)
  Tensor seed = random_tensor({16, 64}, 25);    // (N, 64)
  std::vector<Tensor> grads(StorePolicy& policy) {
    PolicyScope scope(policy);
    for (Tensor* w : {&w0, &w1, &w2}) w->zero_grad();
    auto block = [](const Tensor& in, const Tensor& w) {
      return ops::gelu(ops::linear(ops::gelu(ops::linear(in, w, Tensor())), w, Tensor()));
    };
    const Tensor a = ops::linear(x, w0, Tensor());  // (N, 64)
    const Tensor y1 = checkpoint([&](const Tensor& in) { return block(in, w1); }, a);
    const Tensor y2 = checkpoint([&](const Tensor& in) { return block(in, w2); }, y1);
    backward(ops::scale(y2, 30.0f), seed);
    return {w0.grad().clone(), w1.grad().clone(), w2.grad().clone()};
  }
};

// Under recomputation the average holds apart for the tensors the whole backward holds and for
// each recompute's (gact_store.h): the bits of each pool are the greedy allocation over that pool
// alone, and the checkpoint inputs cannot take the bits of the short-lived tensors.
TEST(GactBudget, EachRecomputedSegmentsTensorsHaveABudgetOfTheirOwn) {
  TwoSegmentNet net;
  GactOptions o = toy_options(GactEstimator::Measured);  // avg_bits 3
  GactPolicy policy(o);
  GactStore& g = policy.gact();
  policy.begin_step(0);
  ASSERT_TRUE(g.refresh(0, [&] { return net.grads(policy); }));
  const auto& t = g.tensors();
  ASSERT_EQ(t.size(), 9u);
  std::vector<std::string> ops;
  std::vector<int64_t> recomputed_in;
  for (const auto& e : t) ops.push_back(e.op), recomputed_in.push_back(e.recomputed_in);
  EXPECT_EQ(ops, (std::vector<std::string>{"linear", "checkpoint", "checkpoint", "gelu", "linear", "gelu", "gelu",
                                           "linear", "gelu"}));
  EXPECT_EQ(recomputed_in, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  // Every tensor's quantization noise moves the gradient (none measures 0 as a second rounding
  // of values already on a grid would).
  for (const auto& e : t) EXPECT_GT(e.sensitivity, 0.0) << e.op << " " << e.index;
  std::vector<double> all_c;
  std::vector<int64_t> all_n;
  std::vector<int> pooled;
  for (int64_t pool = 0; pool <= 2; ++pool) {
    std::vector<double> c;
    std::vector<int64_t> n;
    std::vector<int> bits;
    for (const auto& e : t) {
      ASSERT_TRUE(e.estimated);
      if (e.recomputed_in != pool) continue;
      c.push_back(e.sensitivity), n.push_back(e.numel), bits.push_back(e.bits);
    }
    EXPECT_EQ(bits, allocate_bits(c, n, o.avg_bits, o.candidate_bits)) << "pool " << pool;
    EXPECT_LE(avg_bits(bits, n), o.avg_bits) << "pool " << pool;
    all_c.insert(all_c.end(), c.begin(), c.end());
    all_n.insert(all_n.end(), n.begin(), n.end());
    pooled.insert(pooled.end(), bits.begin(), bits.end());
  }
  // Here one budget over all seven would allocate otherwise: the pools are what decided.
  ASSERT_NE(allocate_bits(all_c, all_n, o.avg_bits, o.candidate_bits), pooled);
  // The pools travel with the state (a resumed run reallocates as the uninterrupted one).
  GactStore restored(o);
  restored.import_state(g.export_state(), "test");
  for (size_t l = 0; l < t.size(); ++l) EXPECT_EQ(restored.tensors()[l].recomputed_in, recomputed_in[l]);
}

TEST(GactAnalytic, SensitiveTensorGetsMoreBitsWithoutExtraPasses) {
  ToyNet net;
  GactPolicy policy(toy_options(GactEstimator::Analytic));
  GactStore& g = policy.gact();
  policy.begin_step(0);
  EXPECT_FALSE(g.refresh(0, nullptr));  // nothing observed yet
  net.grads(policy);                    // the training step: forward + backward
  ASSERT_TRUE(g.refresh(0, nullptr));
  EXPECT_EQ(g.last_refresh_passes(), 0);
  const auto& t = g.tensors();
  ASSERT_EQ(t.size(), 2u);
  const double ratio = t[1].sensitivity / t[0].sensitivity;
  EXPECT_GT(ratio, 300.0);  // 900 x (ratio of the two inputs' ranges, near 1)
  EXPECT_LT(ratio, 3000.0);
  EXPECT_GT(t[1].bits, t[0].bits);
  EXPECT_LE(g.average_bits(), 3.0);
  // The analytic value bounds the measured variance from above (range^2/4 per element).
  GactPolicy measured(toy_options(GactEstimator::Measured));
  measured.begin_step(0);
  measured.gact().refresh(0, [&] { return net.grads(measured); });
  for (size_t l = 0; l < 2; ++l) EXPECT_GT(t[l].sensitivity, measured.gact().tensors()[l].sensitivity);
  // Harvested at begin_step too: a refresh called after the next step began still works.
  policy.begin_step(9);
  policy.begin_step(10);
  EXPECT_TRUE(g.refresh(10, nullptr));
}

// The trainer's order: a step begins (forgetting the last step's tensors), then the refresh runs.
// The harvested estimate must come with the tensors' sizes, or the allocator sees empty tensors.
TEST(GactAnalytic, RefreshAfterTheNextStepBeganKnowsTheTensorSizes) {
  ToyNet net;
  GactPolicy policy(toy_options(GactEstimator::Analytic));
  GactStore& g = policy.gact();
  policy.begin_step(0);
  EXPECT_FALSE(g.refresh(0, nullptr));
  net.grads(policy);
  policy.begin_step(1);
  ASSERT_TRUE(g.refresh(1, nullptr));
  const auto& t = g.tensors();
  ASSERT_EQ(t.size(), 2u);
  for (const auto& s : t) EXPECT_EQ(s.numel, 16 * 64);
  EXPECT_GT(t[1].bits, t[0].bits);
  EXPECT_GT(g.average_bits(), 2.0);
  EXPECT_LE(g.average_bits(), 3.0);
}

// The analytic estimate is normalised per op kind so that conv and linear inputs are comparable:
// its ratio to the measured sensitivity is similar for both (both are upper bounds, range^2/4
// per element against the realised rounding variance).
TEST(GactAnalytic, ConvAndLinearEstimatesAgreeWithMeasuredUpToACommonScale) {
  Tensor w1 = ToyNet::param({8, 8, 3, 3}, 11), w2 = ToyNet::param({10, 512}, 12);
  Tensor x = random_tensor({4, 8, 8, 8}, 13), seed = random_tensor({4, 10}, 14);
  ops::Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  auto grads = [&](StorePolicy& p) {
    PolicyScope scope(p);
    w1.zero_grad();
    w2.zero_grad();
    Tensor out = ops::linear(ops::flatten(ops::conv2d(x, w1, Tensor(), co)), w2, Tensor());
    backward(out, seed);
    return std::vector<Tensor>{w1.grad().clone(), w2.grad().clone()};
  };
  GactOptions o = toy_options(GactEstimator::Measured);
  o.avg_bits = 8;
  GactPolicy measured(o);
  double mc[2] = {0, 0};
  for (int step = 0; step < 4; ++step) {  // average a few refreshes: one draw is noisy
    measured.begin_step(step * 10);
    measured.gact().refresh(step * 10, [&] { return grads(measured); });
    for (int l = 0; l < 2; ++l) mc[l] += measured.gact().tensors()[static_cast<size_t>(l)].sensitivity;
  }
  o.estimator = GactEstimator::Analytic;
  GactPolicy analytic(o);
  analytic.gact().set_conv_kernels({{"", 9}});  // the 3x3 convolution (no layer name here)
  analytic.begin_step(0);
  grads(analytic);
  ASSERT_TRUE(analytic.gact().refresh(0, nullptr));
  const auto& t = analytic.gact().tensors();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].op, "conv2d");
  EXPECT_EQ(t[1].op, "linear");
  const double r_conv = t[0].sensitivity / (mc[0] / 4), r_lin = t[1].sensitivity / (mc[1] / 4);
  RecordProperty("analytic_over_measured_conv", std::to_string(r_conv));
  RecordProperty("analytic_over_measured_linear", std::to_string(r_lin));
  EXPECT_GT(r_conv, 1.0);
  EXPECT_GT(r_lin, 1.0);
  EXPECT_LT(r_conv / r_lin, 4.0) << r_conv << " " << r_lin;
  EXPECT_GT(r_conv / r_lin, 0.25) << r_conv << " " << r_lin;
}

// The convolution's normalisation comes from its kernel (KH*KW / (H*W), ActNN's
// num_locations), not a 3x3 constant: 1x1 and 7x7 convolutions and a linear layer get
// analytic estimates in the same proportion to the measured sensitivity.
TEST(GactAnalytic, ConvolutionNormalisationFollowsTheKernelSize) {
  Tensor w1 = ToyNet::param({8, 8, 1, 1}, 21), w7 = ToyNet::param({8, 8, 7, 7}, 22), wl = ToyNet::param({10, 512}, 23);
  Tensor x = random_tensor({4, 8, 8, 8}, 24), seed = random_tensor({4, 10}, 25);
  ops::Conv2dOptions pad3;
  pad3.pad_h = pad3.pad_w = 3;
  auto grads = [&](StorePolicy& p) {
    PolicyScope scope(p);
    for (Tensor* w : {&w1, &w7, &wl}) w->zero_grad();
    Tensor h;
    {
      LayerScope l("c1");
      h = ops::conv2d(x, w1, Tensor(), {});
    }
    {
      LayerScope l("c7");
      h = ops::conv2d(h, w7, Tensor(), pad3);
    }
    Tensor out;
    {
      LayerScope l("fc");
      out = ops::linear(ops::flatten(h), wl, Tensor());
    }
    backward(out, seed);
    return std::vector<Tensor>{w1.grad().clone(), w7.grad().clone(), wl.grad().clone()};
  };
  GactOptions o = toy_options(GactEstimator::Measured);
  o.avg_bits = 8;
  o.candidate_bits = {1, 2, 3, 4, 8};
  GactPolicy measured(o);
  double mc[3] = {0, 0, 0};
  for (int step = 0; step < 4; ++step) {
    measured.begin_step(step * 10);
    measured.gact().refresh(step * 10, [&] { return grads(measured); });
    for (int l = 0; l < 3; ++l) mc[l] += measured.gact().tensors()[static_cast<size_t>(l)].sensitivity;
  }
  o.estimator = GactEstimator::Analytic;
  GactPolicy analytic(o);
  analytic.gact().set_conv_kernels(conv_kernel_elements({{"c1.weight", w1}, {"c7.weight", w7}, {"fc.weight", wl}}));
  analytic.begin_step(0);
  grads(analytic);
  ASSERT_TRUE(analytic.gact().refresh(0, nullptr));
  const auto& t = analytic.gact().tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].layer, "c1");
  EXPECT_EQ(t[1].layer, "c7");
  double r[3];
  for (int l = 0; l < 3; ++l) r[l] = t[static_cast<size_t>(l)].sensitivity / (mc[l] / 4);
  for (int l = 0; l < 2; ++l) {
    EXPECT_GT(r[l] / r[2], 0.5) << "conv " << l << ": " << r[l] << " linear " << r[2];
    EXPECT_LT(r[l] / r[2], 2.0) << "conv " << l << ": " << r[l] << " linear " << r[2];
  }
  EXPECT_EQ(conv_kernel_elements({{"c7.weight", w7}, {"fc.weight", wl}, {"c1.bias", Tensor::zeros({8})}}),
            (std::map<std::string, int64_t>{{"c7", 49}}));
  // A convolution whose kernel was not given is an error naming the layer, not a guess.
  GactPolicy unknown(o);
  unknown.begin_step(0);
  grads(unknown);
  try {
    unknown.gact().refresh(0, nullptr);
    FAIL() << "no error without the kernel sizes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'c1'"), std::string::npos) << e.what();
  }
}

// GACT's 32-bit candidate: a tensor too sensitive to compress passes through in FP32.
TEST(GactAllocator, KeepsTheMostSensitiveTensorInFp32) {
  const GactOptions defaults;
  EXPECT_EQ(defaults.candidate_bits.back(), kPassThroughBits);
  const std::vector<int64_t> n = {10, 1000, 1000};
  const auto b = allocate_bits({1e12, 1.0, 1.0}, n, 4.0, defaults.candidate_bits);
  EXPECT_EQ(b[0], 32);
  EXPECT_LE(avg_bits(b, n), 4.0);
  EXPECT_EQ(allocate_bits({1.0, 1.0}, {10, 10}, 3.0, defaults.candidate_bits), (std::vector<int>{3, 3}));
  EXPECT_GT(quant_variance_factor(32), 0.0);
  EXPECT_LT(quant_variance_factor(32), 1e-18);
}

TEST(GactStore, ThirtyTwoBitTensorsPassThroughAndAreStillMeasured) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  o.initial_bits = 32;  // FP32 until the first estimate
  GactPolicy policy(o);
  GactStore& g = policy.gact();
  // The first step holds both inputs in FP32: exactly the FP32 gradients, FP32 bytes.
  Fp32Policy fp32;
  const std::vector<Tensor> exact = net.grads(fp32);
  policy.begin_step(0);
  {
    PolicyScope scope(policy);
    Tensor ya = ops::linear(net.xa, net.wa, Tensor());
    std::vector<SavedRecord> records = policy.describe();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].scheme, "fp32");
    EXPECT_EQ(records[0].bits, 32);
    EXPECT_EQ(records[0].bytes, records[0].fp32_bytes);
    clear_tape();
  }
  EXPECT_EQ(g.live_count(), 0u);
  policy.begin_step(0);
  const std::vector<Tensor> first = net.grads(policy);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(first[k].to_vector(), exact[k].to_vector());
  // The refresh measures them (quantized at 8 bits during its passes) and allocates the budget.
  policy.begin_step(1);
  ASSERT_TRUE(g.refresh(1, [&] { return net.grads(policy); }));
  ASSERT_EQ(g.tensors().size(), 2u);
  for (const auto& t : g.tensors()) {
    EXPECT_TRUE(std::isfinite(t.sensitivity));
    EXPECT_GT(t.sensitivity, 0.0);
  }
  EXPECT_GT(g.tensors()[1].bits, g.tensors()[0].bits);
  EXPECT_LE(g.average_bits(), 3.0);
}

TEST(GactWarning, WarnsWhenCompressionVarianceDominates) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  o.avg_bits = 1;  // 1 bit everywhere: a lot of noise
  GactPolicy policy(o);
  GactStore& g = policy.gact();
  // Sampling variance from gradients of two nearby batches (small: the batches barely differ).
  Tensor xa0 = net.xa.clone();
  for (int k = 0; k < 3; ++k) {
    float* p = net.xa.data<float>();
    for (int64_t i = 0; i < net.xa.numel(); ++i) p[i] = xa0.data<float>()[i] * (1.0f + 0.001f * static_cast<float>(k));
    Fp32Policy fp32;
    g.observe_gradients(net.grads(fp32));
  }
  EXPECT_TRUE(std::isfinite(g.sampling_variance()));
  policy.begin_step(0);
  g.refresh(0, [&] { return net.grads(policy); });
  EXPECT_GT(g.predicted_variance(), 0.1 * g.sampling_variance());
  EXPECT_TRUE(g.warned());
  // With a large sampling variance (very different batches) it does not warn.
  GactOptions o8 = o;
  o8.avg_bits = 8;
  GactPolicy quiet(o8);
  for (int k = 0; k < 4; ++k) {
    net.xb = random_tensor({16, 64}, 100 + k);
    net.xa = random_tensor({16, 64}, 200 + k);
    Fp32Policy fp32;
    quiet.gact().observe_gradients(net.grads(fp32));
  }
  quiet.begin_step(0);
  quiet.gact().refresh(0, [&] { return net.grads(quiet); });
  EXPECT_FALSE(quiet.gact().warned());
}

TEST(GactLog, WritesSensitivityAndBitsPerTensor) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  o.log_path = ::testing::TempDir() + "gact_log_test.csv";
  std::remove(o.log_path.c_str());
  GactPolicy policy(o);
  policy.begin_step(0);
  policy.gact().refresh(0, [&] { return net.grads(policy); });
  policy.begin_step(10);
  policy.gact().refresh(10, [&] { return net.grads(policy); });
  std::ifstream in(o.log_path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);  // header + 2 tensors x 2 refreshes
  EXPECT_EQ(lines[0], "step,index,layer,op,numel,sensitivity,bits,recomputed_in");
  EXPECT_EQ(lines[1].rfind("0,0,,linear,1024,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[4].rfind("10,1,,linear,1024,", 0), 0u) << lines[4];
}


// One training step of the toy net under the GACT protocol: begin_step, iterate, forward +
// backward, the gradient observed (the sampling variance).
void toy_step(ToyNet& net, GactPolicy& policy, int64_t step) {
  policy.begin_step(step);
  policy.gact().refresh(step, [&] { return net.grads(policy); });
  policy.gact().observe_gradients(net.grads(policy));
}

// A store restored from export_state continues exactly as the one it was exported from:
// sensitivities, bits, refresh timing, round-robin position, noise salts, sampling variance,
// and (analytic) the estimate harvested from the last finished step.
TEST(GactState, ExportImportRoundTripContinuesIdentically) {
  for (GactEstimator e : {GactEstimator::Measured, GactEstimator::Analytic}) {
    SCOPED_TRACE(e == GactEstimator::Measured ? "measured" : "analytic");
    ToyNet net;
    GactOptions o = toy_options(e);
    o.tensors_per_refresh = 1;  // the round-robin position matters
    o.adapt_interval = 2;
    GactPolicy a(o);
    for (int64_t step = 0; step < 5; ++step) toy_step(net, a, step);
    ASSERT_EQ(a.gact().tensors().size(), 2u);
    const GactState saved = a.gact().export_state();
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [n, t] : saved) by_name[n] = &t;
    ASSERT_TRUE(by_name.count("sensitivity") && by_name.count("bits") && by_name.count("refreshes"));
    EXPECT_EQ(by_name["sensitivity"]->dtype(), DType::f64);
    EXPECT_EQ(by_name["sensitivity"]->numel(), 2);
    EXPECT_EQ(by_name["bits"]->dtype(), DType::i32);
    // Measured: refreshes at steps 0, 2, 4; analytic: at 1, 3 (step 0 has no finished step yet).
    const int64_t refreshed = e == GactEstimator::Measured ? 3 : 2;
    EXPECT_EQ(by_name["refreshes"]->data<int64_t>()[0], refreshed);
    EXPECT_EQ(by_name.count("pending_analytic"), e == GactEstimator::Analytic ? 1u : 0u);
    if (e == GactEstimator::Measured) {
      EXPECT_TRUE(by_name.count("grad_mean"));
    }

    GactPolicy b(o);
    b.gact().import_state(saved, "test");
    EXPECT_TRUE(same_state(b.gact().export_state(), saved));
    EXPECT_EQ(b.gact().refreshes(), refreshed);
    for (size_t l = 0; l < 2; ++l) {
      EXPECT_EQ(b.gact().tensors()[l].bits, a.gact().tensors()[l].bits);
      EXPECT_EQ(b.gact().tensors()[l].sensitivity, a.gact().tensors()[l].sensitivity);
    }
    if (e == GactEstimator::Measured) {
      EXPECT_EQ(b.gact().sampling_variance(), a.gact().sampling_variance());
    }
    for (int64_t step = 5; step < 9; ++step) {
      toy_step(net, a, step);
      toy_step(net, b, step);
    }
    EXPECT_EQ(a.gact().refreshes(), refreshed + 2);
    EXPECT_TRUE(same_state(a.gact().export_state(), b.gact().export_state()));
    // A fresh store (no import) diverges: the state is what makes the difference.
    GactPolicy c(o);
    for (int64_t step = 5; step < 9; ++step) toy_step(net, c, step);
    EXPECT_FALSE(same_state(a.gact().export_state(), c.gact().export_state()));
  }
}

TEST(GactState, ImportErrorsNameWhatDiffers) {
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  GactPolicy a(o);
  toy_step(net, a, 0);
  const GactState saved = a.gact().export_state();
  auto message = [&](const GactState& st) {
    GactPolicy b(o);
    try {
      b.gact().import_state(st, "ckpt.safetensors: gact store 0");
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  GactState missing;
  for (const auto& [n, t] : saved)
    if (n != "bits") missing.emplace_back(n, t);
  EXPECT_NE(message(missing).find("no 'bits'"), std::string::npos) << message(missing);
  GactState extra = saved;
  extra.emplace_back("bogus", saved[0].second);
  EXPECT_NE(message(extra).find("'bogus'"), std::string::npos) << message(extra);
  GactState wrong = saved;
  for (auto& [n, t] : wrong)
    if (n == "sensitivity") t = Tensor::zeros({3}, DType::f64);
  EXPECT_NE(message(wrong).find("'sensitivity'"), std::string::npos) << message(wrong);

  // The restored table is checked against the first step that quantizes: here one tensor
  // where the checkpoint had two.
  GactPolicy b(o);
  b.gact().import_state(saved, "ckpt.safetensors: gact store 0");
  b.begin_step(1);
  {
    PolicyScope scope(b);
    Tensor y = ops::linear(net.xa, net.wa, Tensor());
    try {
      b.gact().check_restored_step();
      ADD_FAILURE() << "no error";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("ckpt.safetensors: gact store 0"), std::string::npos) << m;
      EXPECT_NE(m.find("has 2 quantized tensors"), std::string::npos) << m;
      EXPECT_NE(m.find("quantizes 1"), std::string::npos) << m;
    }
    clear_tape();
  }
  // With the same tensors it passes, and later steps are not checked again.
  GactPolicy ok(o);
  ok.gact().import_state(saved, "x");
  for (int64_t step = 1; step < 3; ++step) toy_step(net, ok, step);
  ok.gact().check_restored_step();
}

TEST(GactConfig, OptionsPresetsAndErrors) {
  auto opts = [](std::map<std::string, std::string> kv) { return SchemeOptions(std::move(kv), "saved_tensors (line 7)"); };
  {
    auto o = opts({{"avg_bits", "3"}, {"adapt_interval", "500"}, {"estimator", "analytic"}, {"group_size", "128"},
                   {"variance", "relative"}, {"adapt_warmup", "true"}});
    auto s = make_gact_store(o);
    auto& g = dynamic_cast<GactStore&>(*s);
    EXPECT_EQ(g.scheme(), "gact");
    EXPECT_EQ(g.gact_options().variance, GactVariance::Relative);
    EXPECT_TRUE(g.gact_options().adapt_warmup);
    EXPECT_EQ(g.gact_options().avg_bits, 3.0);
    EXPECT_EQ(g.gact_options().adapt_interval, 500);
    EXPECT_EQ(g.gact_options().estimator, GactEstimator::Analytic);
    EXPECT_EQ(g.gact_options().initial_bits, 3);
    EXPECT_EQ(g.options().quant.group_size, 128);
  }
  for (auto bad : std::vector<std::map<std::string, std::string>>{
           {{"avg_bits", "0.5"}}, {{"adapt_interval", "0"}}, {{"estimator", "guess"}}, {{"group_size", "0"}},
           {{"bits", "3"}}, {{"avgbits", "3"}}, {{"variance", "squared"}}, {{"adapt_warmup", "often"}}}) {
    auto o = opts(bad);
    try {
      make_gact_store(o);
      FAIL() << bad.begin()->first << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("line 7"), std::string::npos) << e.what();
    }
  }
  // Presets: fixed 4-bit, adaptive 4/3/2; keys written next to a preset override it.
  {
    auto o = opts({});
    auto s = make_preset_store("gact-fix4", o);
    EXPECT_EQ(s->scheme(), "actnn");
    EXPECT_EQ(dynamic_cast<GroupStore&>(*s).options().quant.bits, 4);
  }
  for (auto [name, bits] : std::vector<std::pair<std::string, double>>{
           {"gact-L1", 4}, {"gact-adapt3", 3}, {"gact-adapt2", 2}, {"actnn-L3", 2}}) {
    auto o = opts({{"adapt_interval", "50"}});
    auto s = make_preset_store(name, o);
    auto& g = dynamic_cast<GactStore&>(*s);
    EXPECT_EQ(g.gact_options().avg_bits, bits) << name;
    EXPECT_EQ(g.gact_options().adapt_interval, 50) << name;
  }
  {
    auto o = opts({{"bits", "8"}});
    EXPECT_EQ(dynamic_cast<GroupStore&>(*make_preset_store("actnn-L2", o)).options().quant.bits, 8);
  }
  auto o = opts({});
  EXPECT_THROW(make_preset_store("L9", o), Error);
  // Through the rule policy's registry, with no registration call.
  StorePolicySpec spec;
  spec.default_scheme.scheme = "gact-adapt2";
  spec.default_scheme.options = {{"estimator", "analytic"}};
  RulePolicy rp(spec);
  auto found = find_gact_stores(rp);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0]->gact_options().avg_bits, 2.0);
}

}  // namespace
}  // namespace packrat
