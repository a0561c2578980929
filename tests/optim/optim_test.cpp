#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd_meta.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/models/golden_file.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

Tensor param(const std::vector<float>& v, const Shape& shape) {
  TagScope tag(MemTag::Parameter);
  Tensor t = Tensor::from_vector(shape, v);
  t.set_requires_grad(true);
  return t;
}

void set_grad(Tensor& p, const std::vector<float>& g) {
  TagScope tag(MemTag::Gradient);
  p.autograd_meta()->grad = Tensor::from_vector(p.shape(), g);
}

// The golden problem: gradient at step k is 0.3 * p + (k + 1) * c, c[i] = 0.01 * ((i % 7) - 3).
void set_problem_grad(Tensor& p, int k) {
  auto v = p.to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    const float c = static_cast<float>(0.01 * (static_cast<int>(i % 7) - 3));
    v[i] = 0.3f * v[i] + static_cast<float>(k + 1) * c;
  }
  set_grad(p, v);
}

struct Problem {
  std::map<std::string, std::vector<float>> golden = read_golden_values("optim.txt");
  Tensor p1 = param(golden_at(golden, "init.p1"), {3, 4});
  Tensor p2 = param(golden_at(golden, "init.p2"), {5});
  NamedTensors named() { return {{"p1", p1}, {"p2", p2}}; }
};

void run_against_golden(const std::string& name, Problem& pr, Optimizer& opt) {
  for (int k = 0; k < 6; ++k) {
    if (k == 3) opt.set_lr(opt.lr() * 0.5);
    set_problem_grad(pr.p1, k);
    set_problem_grad(pr.p2, k);
    opt.step();
    const std::string key = name + ".step" + std::to_string(k);
    expect_close(pr.p1.to_vector(), golden_at(pr.golden, key + ".p1"), 1e-6f, 1e-5f, key + ".p1");
    expect_close(pr.p2.to_vector(), golden_at(pr.golden, key + ".p2"), 1e-6f, 1e-5f, key + ".p2");
  }
  EXPECT_EQ(opt.steps(), 6);
}

}  // namespace

TEST(OptimGolden, SgdPlainMatchesPyTorch) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.1});
  run_against_golden("sgd", pr, opt);
}

TEST(OptimGolden, SgdMomentumWeightDecayMatchesPyTorch) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
  run_against_golden("sgd_momentum_wd", pr, opt);
}

TEST(OptimGolden, SgdNesterovWeightDecayMatchesPyTorch) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true});
  run_against_golden("sgd_nesterov_wd", pr, opt);
}

TEST(OptimGolden, SgdDampeningMatchesPyTorch) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  run_against_golden("sgd_dampening", pr, opt);
}

TEST(OptimGolden, AdamWMatchesPyTorch) {
  Problem pr;
  AdamW opt(pr.named(), AdamWOptions{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  run_against_golden("adamw", pr, opt);
}

TEST(OptimGolden, AdamWOtherBetasNoDecayMatchesPyTorch) {
  Problem pr;
  AdamW opt(pr.named(), AdamWOptions{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.0});
  run_against_golden("adamw_betas", pr, opt);
}

TEST(OptimState, StateIsTaggedNamedAndRoundTrips) {
  auto& alloc = Allocator::cpu();
  for (int kind = 0; kind < 2; ++kind) {
    Problem a, b;
    const int64_t before = alloc.current(MemTag::OptimizerState);
    std::unique_ptr<Optimizer> oa, ob;
    if (kind == 0) {
      oa = std::make_unique<SGD>(a.named(), SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      ob = std::make_unique<SGD>(b.named(), SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    } else {
      oa = std::make_unique<AdamW>(a.named(), AdamWOptions{.lr = 1e-2});
      ob = std::make_unique<AdamW>(b.named(), AdamWOptions{.lr = 1e-2});
    }
    const int64_t version = a.p1.version();
    for (int k = 0; k < 3; ++k) {
      set_problem_grad(a.p1, k);
      set_problem_grad(a.p2, k);
      oa->step();
    }
    EXPECT_EQ(a.p1.version(), version + 3);  // in place, version bumped
    const int64_t state_bytes = (12 + 5) * 4 * (kind == 0 ? 1 : 2);
    EXPECT_EQ(alloc.current(MemTag::OptimizerState) - before, state_bytes);
    NamedTensors sd = oa->state_dict();
    std::vector<std::string> names;
    for (auto& [n, t] : sd) names.push_back(n);
    if (kind == 0)
      EXPECT_EQ(names, (std::vector<std::string>{"momentum_buffer.p1", "momentum_buffer.p2", "step"}));
    else
      EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.p1", "exp_avg.p2", "exp_avg_sq.p1", "exp_avg_sq.p2",
                                                 "param_step.p1", "param_step.p2", "step"}));
    EXPECT_EQ(sd.back().second.data<int64_t>()[0], 3);
    // b continues from a's parameters and state; both must then agree exactly.
    std::memcpy(b.p1.raw(), a.p1.raw(), a.p1.nbytes());
    std::memcpy(b.p2.raw(), a.p2.raw(), a.p2.nbytes());
    ob->load_state_dict(sd);
    EXPECT_EQ(ob->steps(), 3);
    for (int k = 3; k < 6; ++k) {
      set_problem_grad(a.p1, k);
      set_problem_grad(a.p2, k);
      set_problem_grad(b.p1, k);
      set_problem_grad(b.p2, k);
      oa->step();
      ob->step();
    }
    EXPECT_EQ(a.p1.to_vector(), b.p1.to_vector()) << "kind " << kind;
    EXPECT_EQ(a.p2.to_vector(), b.p2.to_vector()) << "kind " << kind;
  }
}

TEST(OptimState, LoadRejectsForeignEntries) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.1, .momentum = 0.9});
  Tensor wrong = Tensor::zeros({3});
  Tensor step = Tensor::zeros(Shape{}, DType::i64);
  EXPECT_THROW(opt.load_state_dict({{"momentum_buffer.p9", wrong}, {"step", step}}), Error);
  EXPECT_THROW(opt.load_state_dict({{"momentum_buffer.p1", wrong}, {"step", step}}), Error);
  EXPECT_THROW(opt.load_state_dict({{"exp_avg.p2", Tensor::zeros({5})}, {"step", step}}), Error);
  EXPECT_THROW(opt.load_state_dict({{"momentum_buffer.p2", Tensor::zeros({5})}}), Error);  // no step
}

TEST(OptimStep, ParametersWithoutGradientAreLeftAlone) {
  Problem pr;
  SGD opt(pr.named(), SgdOptions{.lr = 0.1, .momentum = 0.9});
  const auto p2 = pr.p2.to_vector();
  set_problem_grad(pr.p1, 0);
  opt.step();
  EXPECT_EQ(pr.p2.to_vector(), p2);
  NamedTensors sd = opt.state_dict();
  EXPECT_EQ(sd.size(), 2u);  // momentum_buffer.p1, step
  opt.zero_grad();
  EXPECT_FALSE(pr.p1.grad().defined());
  EXPECT_THROW(opt.set_lr(-1.0), Error);
  EXPECT_THROW(SGD(pr.named(), SgdOptions{.lr = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(SGD(NamedTensors{{"a", pr.p1}, {"a", pr.p2}}, SgdOptions{}), Error);
}

TEST(OptimClip, ClipGradNormScalesToMaxNormAndReturnsTheTotal) {
  Tensor a = param({0, 0}, {2}), b = param({0}, {1}), c = param({1}, {1});
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});  // c has no gradient
  EXPECT_NEAR(clip_grad_norm({a, b, c}, 10.0), 5.0, 1e-6);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3.0f, 0.0f}));  // below max: unchanged
  EXPECT_NEAR(clip_grad_norm({a, b, c}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector()[0], 0.6f, 1e-6f);
  EXPECT_NEAR(b.grad().to_vector()[0], 0.8f, 1e-6f);
  EXPECT_EQ(a.grad().storage()->allocation->tag(), MemTag::Gradient);
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}
