#include "quant/fewbit/fewbit_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "autograd/pointwise.h"
#include "core/error.h"

namespace packrat {

namespace {

void check_table_bits(std::string_view fn, int bits, bool step) {
  if (step)
    PACKRAT_CHECK(bits >= 1 && bits <= 8, "fewbit {}: bits must be in [1, 8], got {}", fn, bits);
  else
    PACKRAT_CHECK(bits >= 1 && bits <= kFewbitMaxBits,
                  "fewbit {}: bits must be in [1, {}] for a continuous derivative, got {}", fn, kFewbitMaxBits, bits);
}

FewbitSolverOptions solver_options(const FewbitTableOptions& o, bool even, std::vector<double> breakpoints) {
  FewbitSolverOptions s;
  s.weight = o.weight;
  s.refine = o.refine;
  s.A = o.A;
  s.B = o.B;
  s.even = even;
  s.breakpoints = std::move(breakpoints);
  return s;
}

FewbitTable from_solution(std::string fn, int bits, const FewbitSolution& s, const FewbitSolverOptions& o) {
  FewbitTable t;
  t.fn = std::move(fn);
  t.bits = bits;
  t.symmetric = o.even;
  t.borders = s.borders;
  t.levels = s.levels;
  t.error = s.error;
  t.max_abs_error = s.max_abs_error;
  t.grid = s.grid;
  t.weight = o.weight;
  t.A = o.A;
  t.B = o.B;
  t.refined = o.refine;
  return t;
}

std::string number_list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ", ") + fmt::format("{:.17g}", x);
  return s;
}

}  // namespace

FewbitLut FewbitTable::lut() const {
  PACKRAT_CHECK(!exact, "fewbit {}: an exact step table has no interval lookup (it is applied as a mask)", fn);
  PACKRAT_CHECK(bits >= 1 && bits <= kFewbitMaxBits && levels.size() == (size_t{1} << bits) &&
                    borders.size() + 1 == levels.size(),
                "fewbit {}: malformed {}-bit table ({} borders, {} levels)", fn, bits, borders.size(), levels.size());
  FewbitLut l;
  l.bits = bits;
  l.num_borders = static_cast<int32_t>(borders.size());
  l.symmetric = symmetric ? 1 : 0;
  l.center = static_cast<float>(center);
  for (int j = 0; j < kFewbitMaxBorders; ++j)
    l.borders[j] = j < l.num_borders ? static_cast<float>(borders[static_cast<size_t>(j)])
                                     : std::numeric_limits<float>::infinity();
  for (int j = 0; j <= kFewbitMaxBorders; ++j)
    l.levels[j] = j < static_cast<int>(levels.size()) ? static_cast<float>(levels[static_cast<size_t>(j)]) : 0.0f;
  return l;
}

double FewbitTable::operator()(double x) const {
  const double v = symmetric ? std::abs(x - center) : x;
  size_t idx = 0;
  for (double b : borders) idx += v > b ? 1 : 0;
  return levels[idx];
}

std::string FewbitTable::json() const {
  return fmt::format(
      "{{\"fn\": \"{}\", \"bits\": {}, \"exact\": {}, \"symmetric\": {}, \"weight\": \"{}\", \"A\": {}, \"B\": {}, "
      "\"refined\": {}, \"grid\": {}, \"borders\": [{}], \"levels\": [{}], \"error\": {:.10g}, "
      "\"max_abs_error\": {:.10g}}}",
      fn, bits, exact, symmetric, fewbit_weight_name(weight), A, B, refined, grid, number_list(borders),
      number_list(levels), error, max_abs_error);
}

FewbitTable solve_fewbit_table(std::string fn, const RealFn& df, int bits, const FewbitSolverOptions& o) {
  check_table_bits(fn, bits, false);
  const auto sols = solve_fewbit(df, {bits}, o);
  return from_solution(std::move(fn), bits, sols[0], o);
}

FewbitTable exact_step_table(const FewbitFunction& f) {
  PACKRAT_CHECK(f.step, "fewbit {}: not a step derivative", f.name);
  FewbitTable t;
  t.fn = std::string(f.name);
  t.bits = 1;
  t.exact = true;
  t.borders = f.breakpoints;
  // The value on each piece between the breakpoints.
  for (size_t i = 0; i <= f.breakpoints.size(); ++i) {
    const double a = i == 0 ? f.breakpoints.front() - 1 : f.breakpoints[i - 1];
    const double b = i == f.breakpoints.size() ? f.breakpoints.back() + 1 : f.breakpoints[i];
    t.levels.push_back(f.df(0.5 * (a + b)));
  }
  t.refined = false;
  return t;
}

std::vector<FewbitTable> solve_builtin_tables(std::string_view name, const std::vector<int>& bits,
                                              const FewbitTableOptions& o) {
  const FewbitFunction& f = fewbit_function(name);
  std::vector<FewbitTable> out;
  if (f.step) {
    for (int b : bits) {
      check_table_bits(name, b, true);
      out.push_back(exact_step_table(f));
    }
    return out;
  }
  for (int b : bits) check_table_bits(name, b, false);
  const FewbitSolverOptions so = solver_options(o, f.even, f.breakpoints);
  const auto sols = solve_fewbit(f.df, bits, so);
  for (size_t i = 0; i < bits.size(); ++i) out.push_back(from_solution(std::string(name), bits[i], sols[i], so));
  return out;
}

double fewbit_table_error(const FewbitTable& t, const RealFn& df) {
  FewbitSolverOptions o;
  o.weight = t.weight;
  o.A = t.A;
  o.B = t.B;
  // Where q jumps, in x.
  for (double b : t.borders) {
    o.breakpoints.push_back(t.symmetric ? t.center + b : b);
    if (t.symmetric) o.breakpoints.push_back(t.center - b);
  }
  if (const FewbitFunction* f = find_fewbit_function(t.fn))
    o.breakpoints.insert(o.breakpoints.end(), f->breakpoints.begin(), f->breakpoints.end());
  const FewbitProblem p = make_fewbit_problem(df, o);  // not folded: the whole [A, B]
  // Between consecutive split points q is one level: integrate (f' - q)^2 w piece by piece.
  std::vector<double> edges = {p.lo};
  for (double b : p.options.breakpoints)
    if (b > p.lo && b < p.hi) edges.push_back(b);
  edges.push_back(p.hi);
  double error = 0;
  for (size_t i = 0; i + 1 < edges.size(); ++i)
    error += p.interval_error(edges[i], edges[i + 1], t(0.5 * (edges[i] + edges[i + 1])));
  return error;
}

const std::vector<FewbitTable>& shipped_fewbit_tables() {
  static const std::vector<FewbitTable> tables = [] {
    std::vector<FewbitTable> v;
    for (int i = 0; i < detail::kFewbitTableCount; ++i) {
      const auto& d = detail::kFewbitTableData[i];
      FewbitTable t;
      t.fn = d.fn;
      t.bits = d.bits;
      t.symmetric = d.symmetric != 0;
      t.grid = d.grid;
      t.error = d.error;
      t.max_abs_error = d.max_abs_error;
      const int k = 1 << d.bits;
      t.borders.assign(d.borders, d.borders + k - 1);
      t.levels.assign(d.levels, d.levels + k);
      v.push_back(std::move(t));
    }
    return v;
  }();
  return tables;
}

namespace {

struct Cache {
  std::mutex mutex;
  // (function, bits, options) -> table; node-based, so references stay valid.
  std::map<std::tuple<std::string, int, FewbitWeight, bool, double, double>, std::unique_ptr<FewbitTable>> tables;
};
Cache& cache() {
  static Cache c;
  return c;
}

const FewbitTable* find_shipped(std::string_view fn, int bits) {
  for (const auto& t : shipped_fewbit_tables())
    if (t.fn == fn && t.bits == bits) return &t;
  return nullptr;
}

template <typename Solve>
const FewbitTable& cached(std::string_view fn, int bits, const FewbitTableOptions& o, Solve&& solve) {
  auto& c = cache();
  const auto key = std::make_tuple(std::string(fn), bits, o.weight, o.refine, o.A, o.B);
  {
    std::lock_guard lock(c.mutex);
    auto it = c.tables.find(key);
    if (it != c.tables.end()) return *it->second;
  }
  auto t = std::make_unique<FewbitTable>(solve());  // solved outside the lock
  std::lock_guard lock(c.mutex);
  auto [it, inserted] = c.tables.emplace(key, std::move(t));
  return *it->second;
}

}  // namespace

const FewbitTable& fewbit_table(std::string_view fn, int bits, const FewbitTableOptions& o) {
  const FewbitFunction& f = fewbit_function(fn);
  check_table_bits(fn, bits, f.step);
  if (f.step) return cached(fn, 1, FewbitTableOptions{}, [&] { return exact_step_table(f); });
  if (o.shipped())
    if (const FewbitTable* t = find_shipped(fn, bits)) return *t;
  return cached(fn, bits, o, [&] { return solve_builtin_tables(fn, {bits}, o)[0]; });
}

const FewbitTable& fewbit_table(const Pointwise& fn, int bits, const FewbitTableOptions& o) {
  if (find_fewbit_function(fn.name)) return fewbit_table(fn.name, bits, o);
  PACKRAT_CHECK(fn.df != nullptr, "fewbit {}: the function has no derivative f'", fn.name);
  check_table_bits(fn.name, bits, false);
  return cached(fn.name, bits, o, [&] {
    auto df = fn.df;
    return solve_fewbit_table(std::string(fn.name), [df](double x) { return static_cast<double>(df(static_cast<float>(x))); },
                              bits, solver_options(o, fn.even_derivative, {}));
  });
}

std::string fewbit_tables_source(const std::vector<FewbitTable>& tables) {
  std::string s =
      "// Generated by `build/bin/fewbit generate`: do not edit. The FewBitTables tests and\n"
      "// `fewbit check-tables` fail when a regeneration no longer matches these numbers.\n"
      "// Weighted-L2 optimal piecewise-constant approximations of f' (Few-Bit Backward, arXiv:2202.00441),\n"
      "// uniform weight on [-10, 10], borders refined after the DP. Symmetric tables are on |x|.\n"
      "#include \"quant/fewbit/fewbit_table.h\"\n\n"
      "namespace packrat::detail {\n\n"
      "// fn, bits, symmetric, grid cells, error (eq. 3), max |f' - q|, borders, levels\n"
      "const FewbitTableData kFewbitTableData[] = {\n";
  for (const auto& t : tables) {
    PACKRAT_CHECK(!t.exact, "fewbit generate: {} is exact and needs no shipped table", t.fn);
    s += fmt::format("    {{\"{}\", {}, {}, {}, {:.17g}, {:.17g},\n     {{{}}},\n     {{{}}}}},\n", t.fn, t.bits,
                     t.symmetric ? 1 : 0, t.grid, t.error, t.max_abs_error, number_list(t.borders),
                     number_list(t.levels));
  }
  if (tables.empty()) s += "    {nullptr, 0, 0, 0, 0, 0, {}, {}},\n";
  s += "};\n";
  s += fmt::format("const int kFewbitTableCount = {};\n\n}}  // namespace packrat::detail\n", tables.size());
  return s;
}

bool fewbit_tables_match(const FewbitTable& a, const FewbitTable& b, double tol, std::string* why) {
  auto bad = [&](const std::string& m) {
    if (why) *why = fmt::format("{} {}-bit: {}", a.fn, a.bits, m);
    return false;
  };
  if (a.fn != b.fn || a.bits != b.bits) return bad(fmt::format("compared with {} {}-bit", b.fn, b.bits));
  if (a.symmetric != b.symmetric) return bad("symmetry differs");
  if (a.borders.size() != b.borders.size() || a.levels.size() != b.levels.size()) return bad("sizes differ");
  for (size_t i = 0; i < a.borders.size(); ++i)
    if (std::abs(a.borders[i] - b.borders[i]) > tol)
      return bad(fmt::format("border {} is {} vs {}", i, a.borders[i], b.borders[i]));
  for (size_t i = 0; i < a.levels.size(); ++i)
    if (std::abs(a.levels[i] - b.levels[i]) > tol)
      return bad(fmt::format("level {} is {} vs {}", i, a.levels[i], b.levels[i]));
  if (std::abs(a.error - b.error) > tol) return bad(fmt::format("error is {} vs {}", a.error, b.error));
  return true;
}

}  // namespace packrat
