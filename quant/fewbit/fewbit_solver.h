#pragma once
// The Few-Bit Backward solver (Novikov et al., arXiv:2202.00441, section 3 and appendix G): the
// weighted-L2 optimal piecewise-constant approximation q(x|s, y) of a derivative f',
//   L(s, y) = sum_i int_{s_i}^{s_{i+1}} (f'(x) - y_i)^2 w(x) dx            (eq. 3, 4)
// found by dynamic programming over a grid (eq. 7) in the O(n)-memory prefix-integral form
// (eq. 9), then optionally polished by gradient descent on the borders (eq. 5 is the DP in the
// continuum; its border gradient is dL/ds_i = w(s_i) [(f'(s_i) - y_{i-1})^2 - (f'(s_i) - y_i)^2]).
// Levels are always the weighted means of eq. 8.
//
// Where f' is even (sigmoid, tanh) the problem is folded onto |x|: q approximates f' on
// [0, max(|A|, |B|)] with the weight w(u) + w(-u), so b bits buy 2^b intervals on the half line
// and the error reported is still the one over the whole [A, B].
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace packrat {

enum class FewbitWeight : uint8_t { Uniform, Normal };
std::string_view fewbit_weight_name(FewbitWeight w);
FewbitWeight fewbit_weight_by_name(std::string_view name);  // "uniform" | "normal"; throws otherwise

using RealFn = std::function<double(double)>;

// The weight interval [A, B] must be finite and inside [-kFewbitMaxRange, kFewbitMaxRange]:
// every built-in f' is constant to double precision beyond |x| = 40, and the solver's cost grows
// with the width (a table on [-100, 100] takes ~15 s on 2 cores, on [-1000, 1000] minutes).
constexpr double kFewbitMaxRange = 100.0;
constexpr double kFewbitMinWidth = 1e-3;  // B - A at least this

struct FewbitSolverOptions {
  FewbitWeight weight = FewbitWeight::Uniform;  // uniform: w = 1 on [A, B]; normal: N(0, sigma^2) density on [A, B]
  double A = -10.0, B = 10.0;
  double sigma = 1.0;
  bool refine = true;     // border refinement by the analytic gradient after the DP
  bool even = false;      // f' even: fold onto |x| (see above)
  int grid = 0;           // DP grid cells; 0: from 1000, doubled until every error settles
  double grid_tolerance = 1e-5;  // "settles": errors of grid n and n/2 within this
  std::vector<double> breakpoints;  // where f' jumps or kinks: quadrature splits there
};

// One piecewise-constant approximation with `intervals` pieces.
struct FewbitSolution {
  int intervals = 0;
  std::vector<double> borders;  // interior borders, ascending (intervals - 1); on |x| when folded
  std::vector<double> levels;   // value on each interval (intervals)
  double error = 0;             // eq. 3 over [A, B]
  double max_abs_error = 0;     // sup over [A, B] of |f'(x) - q(x)|
  int grid = 0;                 // cells of the DP grid it came from
};

// The weighted problem after folding: domain [lo, hi], weight w, integrand f'.
struct FewbitProblem {
  RealFn df;
  double lo = 0, hi = 0;
  FewbitSolverOptions options;
  double weight(double x) const;
  // Moments int_a^b w, int_a^b w f', int_a^b w f'^2 by composite Gauss-Legendre, split at breakpoints.
  void moments(double a, double b, double& m0, double& m1, double& m2) const;
  // int_a^b (f' - y)^2 w, computed directly (no cancellation).
  double interval_error(double a, double b, double y) const;
};
FewbitProblem make_fewbit_problem(RealFn df, const FewbitSolverOptions& o);

// Prefix integrals on the grid t_0 = lo < ... < t_n = hi (eq. 9).
struct FewbitPrefix {
  std::vector<double> t;   // (n + 1) grid points
  std::vector<double> W;   // (n + 1) int_lo^{t_i} w
  std::vector<double> FW;  // (n + 1) int_lo^{t_i} w f'
  std::vector<double> F2;  // (n + 1) int_lo^{t_i} w f'^2
  int cells() const { return static_cast<int>(t.size()) - 1; }
  // T(j, i) of eq. 9: the error of the best constant on [t_j, t_i].
  double cost(int j, int i) const;
};
FewbitPrefix fewbit_prefix(const FewbitProblem& p, int cells);

// Exact DP of eq. 7 on the grid for 1..K intervals: result[k-1] holds the k-1 interior border
// indices of the best k-piece approximation with borders on grid points; dp_error[k-1] its error.
std::vector<std::vector<int>> fewbit_grid_dp(const FewbitPrefix& g, int K, std::vector<double>* dp_error = nullptr);
// Exhaustive search over all border placements (tests; tiny grids only).
double fewbit_grid_brute_force(const FewbitPrefix& g, int k, std::vector<int>* borders = nullptr);

// Levels (eq. 8), error and sup error of the approximation with these borders.
FewbitSolution fewbit_evaluate(const FewbitProblem& p, std::vector<double> borders);
// Gradient descent on the borders from `start`; never increases the error.
FewbitSolution fewbit_refine(const FewbitProblem& p, const FewbitSolution& start);

// The full solver: one solution per requested bit-width (2^b intervals each).
std::vector<FewbitSolution> solve_fewbit(const RealFn& df, const std::vector<int>& bits, const FewbitSolverOptions& o);

// The activations the shipped tables approximate, with f and f' in double precision
// (PyTorch's definitions: gelu with erf, leaky slope 0.01, elu alpha 1, softplus beta 1).
struct FewbitFunction {
  std::string_view name;
  double (*f)(double);
  double (*df)(double);
  bool even = false;  // f' even: tables on |x|
  bool step = false;  // f' takes two values: an exact 1-bit mask, no table
  std::vector<double> breakpoints;  // jumps or kinks of f'
};
const std::vector<FewbitFunction>& fewbit_functions();
// Throws naming the function and the known ones when unknown.
const FewbitFunction& fewbit_function(std::string_view name);
const FewbitFunction* find_fewbit_function(std::string_view name);

}  // namespace packrat
