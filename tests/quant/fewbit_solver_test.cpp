#include "quant/fewbit/fewbit_solver.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autograd/pointwise.h"
#include "core/error.h"
#include "quant/fewbit/fewbit_table.h"

namespace packrat {
namespace {

FewbitSolverOptions on(double a, double b) {
  FewbitSolverOptions o;
  o.A = a;
  o.B = b;
  return o;
}

// The DP of eq. 7 finds the same optimum as trying every border placement on the grid.
TEST(FewBitSolver, DpMatchesBruteForceOnSmallGrids) {
  const std::vector<std::pair<const char*, RealFn>> fns = {
      {"gelu", fewbit_function("gelu").df},
      {"wiggle", [](double x) { return std::sin(3 * x) + 0.3 * x; }},
      {"hardswish", fewbit_function("hardswish").df},
  };
  for (const auto& [name, df] : fns) {
    // Normal weight on [-10, 10]: the tails add less than an ulp to the prefix sums, where a
    // careless T(j, i) goes negative.
    for (auto [w, a] : {std::pair{FewbitWeight::Uniform, 4.0}, std::pair{FewbitWeight::Normal, 4.0},
                        std::pair{FewbitWeight::Normal, 10.0}}) {
      auto o = on(-a, a);
      o.weight = w;
      const FewbitPrefix g = fewbit_prefix(make_fewbit_problem(df, o), 14);
      std::vector<double> dp_error;
      const auto dp = fewbit_grid_dp(g, 5, &dp_error);
      for (int k = 1; k <= 5; ++k) {
        std::vector<int> bf_borders;
        const double bf = fewbit_grid_brute_force(g, k, &bf_borders);
        EXPECT_NEAR(dp_error[static_cast<size_t>(k - 1)], bf, 1e-12) << name << " k=" << k;
        // The borders the DP returns achieve its error.
        double total = 0;
        int last = 0;
        for (int j : dp[static_cast<size_t>(k - 1)]) total += g.cost(last, j), last = j;
        total += g.cost(last, g.cells());
        EXPECT_NEAR(total, bf, 1e-12) << name << " k=" << k;
        EXPECT_EQ(static_cast<int>(dp[static_cast<size_t>(k - 1)].size()), k - 1);
      }
    }
  }
}

// Eq. 9: T(j, i) from prefix integrals equals the direct integral of (f' - y)^2 w.
TEST(FewBitSolver, PrefixCostEqualsDirectIntegral) {
  const auto p = make_fewbit_problem(fewbit_function("silu").df, on(-10, 10));
  const FewbitPrefix g = fewbit_prefix(p, 40);
  for (auto [j, i] : {std::pair{0, 40}, std::pair{3, 17}, std::pair{20, 21}}) {
    double m0, m1, m2;
    p.moments(g.t[static_cast<size_t>(j)], g.t[static_cast<size_t>(i)], m0, m1, m2);
    EXPECT_NEAR(g.cost(j, i), p.interval_error(g.t[static_cast<size_t>(j)], g.t[static_cast<size_t>(i)], m1 / m0), 1e-10);
  }
}

TEST(FewBitSolver, ErrorsFallAsBitsGrow) {
  for (const auto& f : fewbit_functions()) {
    if (f.step) continue;
    double prev = INFINITY;
    for (int b = 1; b <= 4; ++b) {
      const double e = fewbit_table(f.name, b).error;
      EXPECT_GT(e, 0.0) << f.name;
      EXPECT_LT(e, prev) << f.name << " " << b << " bits";
      prev = e;
    }
  }
}

// Refinement never loses, and at a refined border of a smooth f' the first-order condition of
// eq. 5 holds to rounding: f'(s_i) is the mean of the two levels beside it.
TEST(FewBitSolver, RefinementReachesTheBorderCondition) {
  FewbitSolverOptions o;
  o.refine = false;
  o.grid = 400;  // coarse on purpose: the DP borders are off by up to a cell
  const auto& gelu = fewbit_function("gelu");
  const auto coarse = solve_fewbit(gelu.df, {3}, o)[0];
  const auto p = make_fewbit_problem(gelu.df, o);
  const auto fine = fewbit_refine(p, coarse);
  EXPECT_LE(fine.error, coarse.error);
  for (size_t i = 0; i < fine.borders.size(); ++i)
    EXPECT_NEAR(gelu.df(fine.borders[i]), 0.5 * (fine.levels[i] + fine.levels[i + 1]), 1e-12) << "border " << i;

  // SELU's f' jumps at 0: a border may rest there, and the others still reach the condition.
  const auto& selu = fewbit_function("selu");
  o.breakpoints = selu.breakpoints;
  const auto ps = make_fewbit_problem(selu.df, o);
  const auto s = fewbit_refine(ps, solve_fewbit(selu.df, {3}, o)[0]);
  for (size_t i = 0; i < s.borders.size(); ++i)
    if (std::abs(s.borders[i]) > 1e-6) {
      EXPECT_NEAR(selu.df(s.borders[i]), 0.5 * (s.levels[i] + s.levels[i + 1]), 1e-12) << "selu border " << i;
    } else {
      EXPECT_EQ(s.borders[i], 0.0) << "selu border " << i << " rests on the jump";
    }
}

// The refined borders are a fixed point, not wherever the descent stopped: started from the
// borders of two different grids (as different compilers' rounding starts it from different
// places), the solver ends at the same borders. Where f' - 1/2 is odd (gelu, silu, softplus,
// gelu_tanh, hardswish) the optimum is symmetric about 0 and the middle border is 0; the descent
// alone had left softplus's at 3.5e-5 and gelu's 4-bit borders 2e-5 off their mirror images.
TEST(FewBitSolver, RefinedBordersAreTheSameFixedPointFromAnyStart) {
  for (const char* name : {"gelu", "silu", "softplus", "gelu_tanh", "hardswish", "mish", "elu"}) {
    const auto& f = fewbit_function(name);
    FewbitSolverOptions o;
    o.even = f.even;
    o.breakpoints = f.breakpoints;
    o.grid = 1000;
    const auto a = solve_fewbit(f.df, {2, 3, 4}, o);
    o.grid = 3000;
    const auto b = solve_fewbit(f.df, {2, 3, 4}, o);
    const bool odd = std::string(name) != "mish" && std::string(name) != "elu";
    for (size_t k = 0; k < a.size(); ++k) {
      const auto& s = a[k].borders;
      ASSERT_EQ(s.size(), b[k].borders.size());
      for (size_t i = 0; i < s.size(); ++i) {
        EXPECT_NEAR(s[i], b[k].borders[i], 1e-9) << name << " " << a[k].intervals << " intervals, border " << i;
        if (odd) {
          EXPECT_NEAR(s[i], -s[s.size() - 1 - i], 1e-9) << name << " " << a[k].intervals << " border " << i;
        }
      }
    }
  }
}

// The grid is fine enough: a solve on a much finer grid moves no error in its fourth decimal.
TEST(FewBitSolver, GridIsConverged) {
  for (const char* name : {"gelu", "hardswish"}) {
    const auto& f = fewbit_function(name);
    FewbitSolverOptions o;
    o.even = f.even;
    o.breakpoints = f.breakpoints;
    o.grid = 8000;  // 8x the starting grid, 2-4x the grid the tables settled on
    o.refine = false;
    const auto fine = solve_fewbit(f.df, {1, 2, 3, 4}, o);
    for (int b = 1; b <= 4; ++b)
      EXPECT_NEAR(fine[static_cast<size_t>(b - 1)].error, fewbit_table(name, b).error, 5e-5) << name << " " << b;
  }
}

// Folding an even f' onto |x| reports the error over the whole [A, B].
TEST(FewBitSolver, EvenFoldReportsTheFullLineError) {
  const FewbitTable& t = fewbit_table("tanh", 2);
  ASSERT_TRUE(t.symmetric);
  EXPECT_EQ(t.levels.size(), 4u);  // 2 bits buy 4 intervals on the half line
  const auto& f = fewbit_function("tanh");
  double direct = 0;
  const int n = 400000;
  const double h = 20.0 / n;
  for (int i = 0; i < n; ++i) {
    const double x = -10 + (i + 0.5) * h, r = f.df(x) - t(x);
    direct += r * r * h;
  }
  EXPECT_NEAR(direct, t.error, 1e-6);

  // An interval that is not symmetric folds to the weight w(u) + w(-u) on [0, 8].
  FewbitTableOptions o;
  o.A = -3;
  o.B = 8;
  const FewbitTable& a = fewbit_table("tanh", 2, o);
  EXPECT_EQ(a.A, -3);
  direct = 0;
  const double h2 = 11.0 / n;
  for (int i = 0; i < n; ++i) {
    const double x = -3 + (i + 0.5) * h2, r = f.df(x) - a(x);
    direct += r * r * h2;
  }
  EXPECT_NEAR(direct, a.error, 1e-6);
}

// The double-precision f' the tables approximate is the activation the ops run.
TEST(FewBitSolver, ReferenceDerivativesMatchThePointwiseOps) {
  for (const auto& f : fewbit_functions()) {
    const Pointwise& p = pointwise_by_name(f.name);
    EXPECT_EQ(f.even, p.even_derivative) << f.name;
    EXPECT_EQ(f.step, p.derivative_is_step) << f.name;
    for (double x = -9.99; x < 10; x += 0.0731) {
      EXPECT_NEAR(f.df(x), p.df(static_cast<float>(x)), 2e-5) << f.name << " at " << x;
      EXPECT_NEAR(f.f(x), p.f(static_cast<float>(x)), 2e-5 * (1 + std::abs(x))) << f.name << " at " << x;
    }
  }
}

// Each weight gets its own optimum: the normal-weight table beats the uniform one under the
// normal weight, and the other way round (at 1 bit both put the border at 0).
TEST(FewBitSolver, EachWeightGetsItsOwnOptimum) {
  const auto& gelu = fewbit_function("gelu");
  for (int bits : {2, 3}) {
    const FewbitTable& u = fewbit_table("gelu", bits);
    const FewbitTable& n = fewbit_table("gelu", bits, {FewbitWeight::Normal, true});
    EXPECT_EQ(n.weight, FewbitWeight::Normal);
    FewbitSolverOptions on;
    on.weight = FewbitWeight::Normal;
    const auto pn = make_fewbit_problem(gelu.df, on);
    const auto pu = make_fewbit_problem(gelu.df, FewbitSolverOptions{});
    EXPECT_NEAR(fewbit_evaluate(pn, n.borders).error, n.error, 1e-9);
    EXPECT_LT(n.error, fewbit_evaluate(pn, u.borders).error - 1e-6) << bits;
    EXPECT_LT(u.error, fewbit_evaluate(pu, n.borders).error - 1e-6) << bits;
    EXPECT_EQ(&n, &fewbit_table("gelu", bits, {FewbitWeight::Normal, true}));  // cached
  }
}

TEST(FewBitSolver, BadRequestsAreClearErrors) {
  EXPECT_THROW(fewbit_function("swishy"), Error);
  try {
    fewbit_table("swishy", 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown function 'swishy'"), std::string::npos) << e.what();
  }
  for (int bits : {0, 5}) {
    try {
      fewbit_table("gelu", bits);
      FAIL() << "no error for " << bits << " bits";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bits must be in [1, 4]"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fewbit_weight_by_name("laplace"), Error);
  auto o = on(1, -1);
  EXPECT_THROW(make_fewbit_problem(fewbit_function("gelu").df, o), Error);
}

}  // namespace
}  // namespace packrat
