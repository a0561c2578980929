#include "quant/fewbit/fewbit_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace packrat {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPanel = 0.05;  // widest quadrature panel: 8-point Gauss-Legendre is exact to ~1e-15 there

// 8-point Gauss-Legendre on [-1, 1]: nodes +-x[i], weights w[i].
constexpr double kGlX[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267, 0.9602898564975363};
constexpr double kGlW[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763};

// Calls fn(x, weight) at the quadrature nodes of [a, b], split at the breakpoints inside.
template <typename Fn>
void quadrature(const std::vector<double>& breakpoints, double a, double b, Fn&& fn) {
  if (!(b > a)) return;
  double start = a;
  auto piece = [&](double lo, double hi) {
    const int panels = std::max(1, static_cast<int>(std::ceil((hi - lo) / kPanel)));
    const double h = (hi - lo) / panels;
    for (int p = 0; p < panels; ++p) {
      const double mid = lo + (p + 0.5) * h, half = 0.5 * h;
      for (int k = 0; k < 4; ++k) {
        fn(mid - half * kGlX[k], half * kGlW[k]);
        fn(mid + half * kGlX[k], half * kGlW[k]);
      }
    }
  };
  for (double bp : breakpoints)
    if (bp > start && bp < b) {
      piece(start, bp);
      start = bp;
    }
  piece(start, b);
}

double normal_pdf(double x) { return std::exp(-0.5 * x * x) * 0.3989422804014327; }

}  // namespace

std::string_view fewbit_weight_name(FewbitWeight w) { return w == FewbitWeight::Uniform ? "uniform" : "normal"; }

FewbitWeight fewbit_weight_by_name(std::string_view name) {
  if (name == "uniform") return FewbitWeight::Uniform;
  if (name == "normal") return FewbitWeight::Normal;
  fail("fewbit: unknown weight '{}' (known: uniform, normal)", name);
}

// ---------------------------------------------------------------------------------------------
// The problem after folding.

double FewbitProblem::weight(double x) const {
  const auto& o = options;
  auto w = [&](double v) {
    if (v < o.A || v > o.B) return 0.0;
    return o.weight == FewbitWeight::Uniform ? 1.0 : normal_pdf(v / o.sigma) / o.sigma;
  };
  return o.even ? w(x) + w(-x) : w(x);
}

void FewbitProblem::moments(double a, double b, double& m0, double& m1, double& m2) const {
  m0 = m1 = m2 = 0;
  quadrature(options.breakpoints, a, b, [&](double x, double qw) {
    const double w = weight(x) * qw, d = df(x);
    m0 += w;
    m1 += w * d;
    m2 += w * d * d;
  });
}

double FewbitProblem::interval_error(double a, double b, double y) const {
  double e = 0;
  quadrature(options.breakpoints, a, b, [&](double x, double qw) {
    const double r = df(x) - y;
    e += weight(x) * qw * r * r;
  });
  return e;
}

FewbitProblem make_fewbit_problem(RealFn df, const FewbitSolverOptions& o) {
  PACKRAT_CHECK(std::isfinite(o.A) && std::isfinite(o.B) && o.A >= -kFewbitMaxRange && o.B <= kFewbitMaxRange,
                "fewbit solver: the weight interval [{}, {}] must be finite and within [{}, {}]", o.A, o.B,
                -kFewbitMaxRange, kFewbitMaxRange);
  PACKRAT_CHECK(o.B > o.A, "fewbit solver: the weight interval [{}, {}] is empty", o.A, o.B);
  // Narrower, the grid's cells fall below the spacing of doubles there and borders coincide.
  PACKRAT_CHECK(o.B - o.A >= kFewbitMinWidth, "fewbit solver: the weight interval [{}, {}] is narrower than {}", o.A,
                o.B, kFewbitMinWidth);
  PACKRAT_CHECK(o.sigma > 0, "fewbit solver: sigma must be positive, got {}", o.sigma);
  FewbitProblem p;
  p.df = std::move(df);
  p.options = o;
  if (o.even) {
    p.lo = 0;
    p.hi = std::max(std::abs(o.A), std::abs(o.B));
    // Fold the breakpoints onto |x| and add the weight's own edges where they fall inside.
    std::vector<double> bps;
    for (double b : o.breakpoints) bps.push_back(std::abs(b));
    for (double e : {std::abs(o.A), std::abs(o.B)})
      if (e < p.hi) bps.push_back(e);
    p.options.breakpoints = bps;
  } else {
    p.lo = o.A;
    p.hi = o.B;
  }
  auto& b = p.options.breakpoints;
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return p;
}

// ---------------------------------------------------------------------------------------------
// Grid DP (eq. 7 and 9).

double FewbitPrefix::cost(int j, int i) const {
  const double w = std::max(W[i] - W[j], 1e-300), fw = FW[i] - FW[j];
  return std::max(0.0, F2[i] - F2[j] - fw * fw / w);
}

FewbitPrefix fewbit_prefix(const FewbitProblem& p, int cells) {
  PACKRAT_CHECK(cells >= 1, "fewbit solver: the grid needs at least one cell, got {}", cells);
  FewbitPrefix g;
  const size_t n = static_cast<size_t>(cells);
  g.t.resize(n + 1);
  g.W.assign(n + 1, 0.0);
  g.FW.assign(n + 1, 0.0);
  g.F2.assign(n + 1, 0.0);
  for (size_t i = 0; i <= n; ++i) g.t[i] = p.lo + (p.hi - p.lo) * static_cast<double>(i) / static_cast<double>(n);
  g.t[n] = p.hi;
  for (size_t i = 0; i < n; ++i) {
    double m0, m1, m2;
    p.moments(g.t[i], g.t[i + 1], m0, m1, m2);
    g.W[i + 1] = g.W[i] + m0;
    g.FW[i + 1] = g.FW[i] + m1;
    g.F2[i + 1] = g.F2[i] + m2;
  }
  return g;
}

std::vector<std::vector<int>> fewbit_grid_dp(const FewbitPrefix& g, int K, std::vector<double>* dp_error) {
  const int n = g.cells();
  PACKRAT_CHECK(K >= 1 && K <= n, "fewbit solver: {} intervals on a grid of {} cells", K, n);
  const double *W = g.W.data(), *FW = g.FW.data(), *F2 = g.F2.data();
  std::vector<double> prev(static_cast<size_t>(n) + 1), cur(static_cast<size_t>(n) + 1, kInf);  // (n + 1) DP(i, k)
  std::vector<std::vector<int>> arg(static_cast<size_t>(K) + 1);  // arg[k][i]: best j for DP(i, k)
  for (int i = 0; i <= n; ++i) prev[static_cast<size_t>(i)] = i == 0 ? 0.0 : g.cost(0, i);
  std::vector<double> errors = {prev[static_cast<size_t>(n)]};
  for (int k = 2; k <= K; ++k) {
    arg[static_cast<size_t>(k)].assign(static_cast<size_t>(n) + 1, -1);
    int* ak = arg[static_cast<size_t>(k)].data();
    const double* pv = prev.data();
    double* cv = cur.data();
    for (int i = 0; i < k; ++i) cv[i] = kInf;
#pragma omp parallel for schedule(dynamic, 64)
    for (int i = k; i <= n; ++i) {
      // min over j in [k-1, i-1] of DP(j, k-1) + T(j, i), eight lanes at a time (vectorises).
      // T >= 0 is enforced as in cost(): where the weight adds less than an ulp to the prefix
      // sums (normal tails), W(i) - W(j) is rounding noise and fw^2 / w could be anything.
      const double Wi = W[i], Fi = FW[i], F2i = F2[i];
      double best[8];
      int bj[8];
      for (int l = 0; l < 8; ++l) best[l] = kInf, bj[l] = k - 1;
      int j = k - 1;
      for (; j + 8 <= i; j += 8)
        for (int l = 0; l < 8; ++l) {
          const double fw = Fi - FW[j + l], w = std::max(Wi - W[j + l], 1e-300);
          const double v = pv[j + l] + std::max(0.0, F2i - F2[j + l] - fw * fw / w);
          if (v < best[l]) best[l] = v, bj[l] = j + l;
        }
      for (int l = 0; j < i; ++j, ++l) {
        const double fw = Fi - FW[j], w = std::max(Wi - W[j], 1e-300);
        const double v = pv[j] + std::max(0.0, F2i - F2[j] - fw * fw / w);
        if (v < best[l]) best[l] = v, bj[l] = j;
      }
      double b = kInf;
      int a = k - 1;
      for (int l = 0; l < 8; ++l)
        if (best[l] < b || (best[l] == b && bj[l] < a)) b = best[l], a = bj[l];
      cv[i] = b;
      ak[i] = a;
    }
    errors.push_back(cur[static_cast<size_t>(n)]);
    std::swap(prev, cur);
  }
  std::vector<std::vector<int>> result(static_cast<size_t>(K));
  for (int k = 1; k <= K; ++k) {
    std::vector<int> b;
    int i = n;
    for (int kk = k; kk >= 2; --kk) {
      i = arg[static_cast<size_t>(kk)][static_cast<size_t>(i)];
      b.push_back(i);
    }
    std::reverse(b.begin(), b.end());
    result[static_cast<size_t>(k - 1)] = std::move(b);
  }
  if (dp_error) *dp_error = errors;
  return result;
}

double fewbit_grid_brute_force(const FewbitPrefix& g, int k, std::vector<int>* borders) {
  const int n = g.cells();
  PACKRAT_CHECK(k >= 1 && k <= n && n <= 24, "fewbit brute force: {} intervals on {} cells is too large", k, n);
  std::vector<int> cur, best_b;
  double best = kInf;
  // Chooses interior borders cur[0] < cur[1] < ... in (last, n) recursively.
  auto rec = [&](auto&& self, int last, int left, double acc) -> void {
    if (left == 0) {
      const double total = acc + g.cost(last, n);
      if (total < best) best = total, best_b = cur;
      return;
    }
    for (int j = last + 1; j <= n - left; ++j) {
      cur.push_back(j);
      self(self, j, left - 1, acc + g.cost(last, j));
      cur.pop_back();
    }
  };
  rec(rec, 0, k - 1, 0.0);
  if (borders) *borders = best_b;
  return best;
}

// ---------------------------------------------------------------------------------------------
// Continuous evaluation and refinement.

namespace {

// Levels (eq. 8) and the error by the one-pass moment form; cheap, for the descent.
double objective(const FewbitProblem& p, const std::vector<double>& borders, std::vector<double>* levels) {
  double err = 0;
  if (levels) levels->clear();
  for (size_t i = 0; i <= borders.size(); ++i) {
    const double a = i == 0 ? p.lo : borders[i - 1], b = i == borders.size() ? p.hi : borders[i];
    double m0, m1, m2;
    p.moments(a, b, m0, m1, m2);
    const double y = m0 > 0 ? m1 / m0 : p.df(0.5 * (a + b));
    err += m0 > 0 ? m2 - m1 * m1 / m0 : 0.0;
    if (levels) levels->push_back(y);
  }
  return err;
}

// Border i of `s` separates intervals i and i + 1 (interval i is [edge(i), edge(i + 1)], edge 0
// the domain's lo, edge K its hi). With the levels optimal (eq. 8), L is stationary in border i
// where f'(s_i) is the mean of its two levels:
//   F_i(s) = 2 f'(s_i) - y_i - y_{i+1} = 0,    dL/ds_i = w(s_i) (y_{i+1} - y_i) F_i.
// F's Jacobian is tridiagonal: y_i = m1_i / m0_i moves with its interval's edges as
//   dy_i/d(right edge b) = w(b) (f'(b) - y_i) / m0_i,   dy_i/d(left edge a) = -w(a) (f'(a) - y_i) / m0_i.
// A border on a jump of f' (selu at 0, hardswish at +-3) where L falls towards the jump from both
// sides has no root of F: it stays on the jump, and the borders on either side are solved apart.
std::vector<double> newton_to_stationary_borders(const FewbitProblem& p, std::vector<double> s) {
  const size_t n = s.size(), K = n + 1;
  if (n == 0) return s;
  constexpr double kH = 1e-6;  // step of the central difference for f''
  auto edge = [&](const std::vector<double>& b, size_t e) { return e == 0 ? p.lo : (e == K ? p.hi : b[e - 1]); };
  struct Interval {
    double m0 = 0, level = 0;
  };
  auto intervals = [&](const std::vector<double>& b) {
    std::vector<Interval> v(K);  // (K)
    for (size_t i = 0; i < K; ++i) {
      double m0, m1, m2;
      p.moments(edge(b, i), edge(b, i + 1), m0, m1, m2);
      v[i] = {m0, m0 > 0 ? m1 / m0 : p.df(0.5 * (edge(b, i) + edge(b, i + 1)))};
    }
    return v;
  };
  auto residual = [&](const std::vector<double>& b, const std::vector<Interval>& v, size_t i) {
    return 2 * p.df(b[i]) - v[i].level - v[i + 1].level;
  };
  // Borders held where they are: on a jump of f' that L falls towards from both sides, or where
  // the weight vanishes (no condition there).
  std::vector<char> fixed(n, 0);  // (n)
  for (size_t i = 0; i < n; ++i) {
    if (p.weight(s[i]) <= 0) fixed[i] = 1;
    for (double bp : p.options.breakpoints) {
      if (std::abs(s[i] - bp) > 1e-6 || p.df(bp - 1e-9) == p.df(bp + 1e-9)) continue;
      auto slope = [&](double x) {  // dL/ds_i with border i at x
        std::vector<double> t = s;
        t[i] = x;
        const auto v = intervals(t);
        return (v[i + 1].level - v[i].level) * residual(t, v, i);
      };
      if (slope(bp - 1e-9) <= 0 && slope(bp + 1e-9) >= 0) s[i] = bp, fixed[i] = 1;
    }
  }
  std::vector<Interval> v = intervals(s);
  auto worst = [&](const std::vector<double>& b, const std::vector<Interval>& iv) {
    double m = 0;
    for (size_t i = 0; i < n; ++i)
      if (!fixed[i]) m = std::max(m, std::abs(residual(b, iv, i)));
    return m;
  };
  double r = worst(s, v);
  for (int iter = 0; iter < 100 && r > 1e-15; ++iter) {
    // The tridiagonal system J d = -F (sub, diag, super), identity rows for the fixed borders.
    std::vector<double> sub(n, 0), diag(n, 1), sup(n, 0), rhs(n, 0);  // (n) each
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      const double x = s[i], w = p.weight(x), d = p.df(x);
      const double d2 = (p.df(x + kH) - p.df(x - kH)) / (2 * kH);
      const Interval &l = v[i], &rt = v[i + 1];
      diag[i] = 2 * d2 - (l.m0 > 0 ? w * (d - l.level) / l.m0 : 0) + (rt.m0 > 0 ? w * (d - rt.level) / rt.m0 : 0);
      if (i > 0 && !fixed[i - 1] && l.m0 > 0) sub[i] = p.weight(s[i - 1]) * (p.df(s[i - 1]) - l.level) / l.m0;
      if (i + 1 < n && !fixed[i + 1] && rt.m0 > 0)
        sup[i] = -p.weight(s[i + 1]) * (p.df(s[i + 1]) - rt.level) / rt.m0;
      rhs[i] = -residual(s, v, i);
    }
    // Thomas algorithm: J is a positive diagonal times L's Hessian, which is positive definite at
    // a minimum, so elimination without pivoting is stable there; a zero pivot ends the polish.
    bool singular = false;
    for (size_t i = 1; i < n && !singular; ++i) {
      if (diag[i - 1] == 0) singular = true;
      else {
        const double f = sub[i] / diag[i - 1];
        diag[i] -= f * sup[i - 1];
        rhs[i] -= f * rhs[i - 1];
      }
    }
    if (singular || diag[n - 1] == 0) break;
    std::vector<double> step(n);  // (n)
    step[n - 1] = rhs[n - 1] / diag[n - 1];
    for (size_t i = n - 1; i-- > 0;) step[i] = (rhs[i] - sup[i] * step[i + 1]) / diag[i];
    // Halve the step until the borders stay ordered inside the domain and the residual falls.
    bool moved = false;
    for (double scale = 1; scale > 1e-6; scale *= 0.5) {
      std::vector<double> t = s;
      for (size_t i = 0; i < n; ++i) t[i] += scale * step[i];
      bool ordered = true;
      for (size_t e = 0; e < K; ++e) ordered = ordered && edge(t, e) < edge(t, e + 1);
      if (!ordered) continue;
      const std::vector<Interval> tv = intervals(t);
      const double tr = worst(t, tv);
      if (tr < r) {
        s = std::move(t), v = tv, r = tr, moved = true;
        break;
      }
    }
    if (!moved) break;
  }
  return s;
}

}  // namespace

FewbitSolution fewbit_evaluate(const FewbitProblem& p, std::vector<double> borders) {
  FewbitSolution s;
  s.intervals = static_cast<int>(borders.size()) + 1;
  objective(p, borders, &s.levels);
  s.borders = std::move(borders);
  s.error = 0;
  s.max_abs_error = 0;
  constexpr double kStep = 5e-4, kEps = 1e-9;
  for (size_t i = 0; i < s.levels.size(); ++i) {
    const double a = i == 0 ? p.lo : s.borders[i - 1], b = i == s.borders.size() ? p.hi : s.borders[i];
    const double y = s.levels[i];
    s.error += p.interval_error(a, b, y);
    // The sup error: a dense sweep plus both sides of every border and breakpoint.
    auto probe = [&](double x) {
      if (x >= a && x <= b && p.weight(x) > 0) s.max_abs_error = std::max(s.max_abs_error, std::abs(p.df(x) - y));
    };
    probe(a + kEps);
    probe(b - kEps);
    for (double x = a; x < b; x += kStep) probe(x);
    for (double bp : p.options.breakpoints) probe(bp - kEps), probe(bp + kEps), probe(bp);
  }
  return s;
}

FewbitSolution fewbit_refine(const FewbitProblem& p, const FewbitSolution& start) {
  std::vector<double> s = start.borders;
  if (s.empty()) return fewbit_evaluate(p, s);
  const size_t K = s.size() + 1;
  constexpr double kMinGap = 1e-9;
  // Edge e of the intervals: lo, the borders, hi. Interval i is [edge(i), edge(i + 1)].
  auto edge = [&](size_t e) { return e == 0 ? p.lo : (e == K ? p.hi : s[e - 1]); };
  struct Piece {  // the moments of one interval
    double m0 = 0, m1 = 0, m2 = 0, mid = 0;
    double level(const FewbitProblem& q) const { return m0 > 0 ? m1 / m0 : q.df(mid); }
    double cost() const { return m0 > 0 ? std::max(0.0, m2 - m1 * m1 / m0) : 0.0; }
  };
  auto piece = [&](double a, double b) {
    Piece r;
    p.moments(a, b, r.m0, r.m1, r.m2);
    r.mid = 0.5 * (a + b);
    return r;
  };
  std::vector<Piece> pieces(K);
  for (size_t i = 0; i < K; ++i) pieces[i] = piece(edge(i), edge(i + 1));
  // Coordinate descent along the analytic border gradient (eq. 5 in the continuum, levels optimal
  // by eq. 8 so the envelope theorem applies):
  //   dL/ds_i = w(s_i) [(f'(s_i) - y_left)^2 - (f'(s_i) - y_right)^2].
  // Each border has its own step, grown on success and halved on failure, so a border sitting on
  // a jump of f' (where the one-sided gradients disagree) stops alone and does not stall the rest.
  std::vector<double> delta(s.size(), 1e-2);  // (K - 1) next move of each border
  for (int sweep = 0; sweep < 3000; ++sweep) {
    bool active = false;
    for (size_t i = 0; i < s.size(); ++i) {  // border i separates intervals i and i + 1
      if (delta[i] < 1e-10) continue;
      active = true;
      const double d = p.df(s[i]), yl = pieces[i].level(p), yr = pieces[i + 1].level(p);
      const double g = p.weight(s[i]) * ((d - yl) * (d - yl) - (d - yr) * (d - yr));
      const double t = s[i] - (g > 0 ? delta[i] : -delta[i]);
      if (g == 0 || !(t > edge(i) + kMinGap && t < edge(i + 2) - kMinGap)) {
        delta[i] *= 0.5;
        continue;
      }
      const Piece a = piece(edge(i), t), b = piece(t, edge(i + 2));
      if (a.cost() + b.cost() < pieces[i].cost() + pieces[i + 1].cost()) {
        s[i] = t;
        pieces[i] = a;
        pieces[i + 1] = b;
        delta[i] *= 1.5;
      } else {
        delta[i] *= 0.5;
      }
    }
    if (!active) break;
  }
  // The descent stops where its steps have shrunk, which in the flat valleys of L (a shift of
  // all borders together moves it by ~1e-13) left borders 1e-5 from the optimum, in a place that
  // depended on the compiler's rounding. Newton's method then solves the optimality condition
  // itself, to a fixed point that rounding moves by ~1e-12 at most.
  s = newton_to_stationary_borders(p, std::move(s));
  FewbitSolution r = fewbit_evaluate(p, s);
  r.grid = start.grid;
  // Keep the start if the exact error disagrees (beyond the integral's own rounding).
  return r.error <= start.error * (1 + 1e-9) + 1e-15 ? r : start;
}

std::vector<FewbitSolution> solve_fewbit(const RealFn& df, const std::vector<int>& bits, const FewbitSolverOptions& o) {
  PACKRAT_CHECK(!bits.empty(), "fewbit solver: no bit-width requested");
  int K = 1;
  for (int b : bits) {
    PACKRAT_CHECK(b >= 1 && b <= 8, "fewbit solver: bits must be in [1, 8], got {}", b);
    K = std::max(K, 1 << b);
  }
  const FewbitProblem p = make_fewbit_problem(df, o);
  auto solve_on = [&](int cells) {
    const FewbitPrefix g = fewbit_prefix(p, cells);
    const auto idx = fewbit_grid_dp(g, K);
    std::vector<FewbitSolution> out;
    for (int b : bits) {
      std::vector<double> borders;
      for (int j : idx[static_cast<size_t>((1 << b) - 1)]) borders.push_back(g.t[static_cast<size_t>(j)]);
      FewbitSolution s = fewbit_evaluate(p, borders);
      s.grid = cells;
      out.push_back(std::move(s));
    }
    return out;
  };
  std::vector<FewbitSolution> sols;
  if (o.grid > 0) {
    sols = solve_on(o.grid);
  } else {
    // Double the grid until no error moves by more than the tolerance (well below the 4th decimal).
    constexpr int kMaxCells = 64000;
    sols = solve_on(1000);
    for (int cells = 2000; cells <= kMaxCells; cells *= 2) {
      auto finer = solve_on(cells);
      double change = 0;
      for (size_t i = 0; i < bits.size(); ++i) change = std::max(change, std::abs(finer[i].error - sols[i].error));
      sols = std::move(finer);
      if (change < o.grid_tolerance) break;
    }
  }
  if (o.refine)
    for (auto& s : sols) s = fewbit_refine(p, s);
  return sols;
}

}  // namespace packrat
