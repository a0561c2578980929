// fewbit: the Few-Bit Backward tables from the command line.
//   fewbit table --fn gelu --bits 3 [--weight uniform|normal] [--refine true|false] [--A -10] [--B 10]
//       borders, levels and the approximation error as JSON (other options than the defaults
//       solve a table now instead of printing the shipped one)
//   fewbit errors [--fn NAME] [--weight ..] [--A ..] [--B ..]
//                              CSV `fn,bits,error,max_abs_error,shipped_error`: the paper's Table 3
//                              computed now (each table solved by the DP solver, eq. 3 integrated
//                              from it; default weight uniform on [-10, 10]), bits 1..4, beside
//                              the same integral for the shipped table; the relu family has one
//                              row, its exact 1-bit mask (error 0)
//   fewbit generate [--out quant/fewbit/fewbit_tables_data.cpp]   (re)solve every shipped table
//   fewbit check-tables        re-solve every shipped table; exit 1 when one has drifted
//   fewbit help
//   fewbit plot-data --fn gelu [--from -6] [--to 6] [--step 0.005]
//       whitespace columns x, f'(x), q_1bit(x) .. q_4bit(x), for scripts/plot_fewbit.sh
// Bad input: one line on stderr and exit code 2.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/fewbit/fewbit_table.h"

using namespace packrat;

namespace {

constexpr const char* kUsage =
    "usage: fewbit table --fn NAME --bits B [--weight uniform|normal] [--refine true|false] [--A X] [--B X]\n"
    "       fewbit errors [--fn NAME] [--weight uniform|normal] [--A X] [--B X] | fewbit generate [--out FILE] | fewbit check-tables\n"
    "       fewbit plot-data --fn NAME [--from X] [--to X] [--step H]";

struct Args {
  std::string command;
  std::map<std::string, std::string> flags;
  std::map<std::string, bool> used;

  std::string get(const std::string& k, const std::string& fallback = "", bool required = false) {
    used[k] = true;
    auto it = flags.find(k);
    if (it == flags.end()) {
      PACKRAT_CHECK(!required, "fewbit {}: missing --{}", command, k);
      return fallback;
    }
    return it->second;
  }
  double number(const std::string& k, double fallback) {
    const std::string s = get(k);
    if (s.empty()) return fallback;
    size_t pos = 0;
    double v = 0;
    try {
      v = std::stod(s, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    PACKRAT_CHECK(pos == s.size() && pos > 0, "fewbit {}: --{} must be a number, got '{}'", command, k, s);
    return v;
  }
  int integer(const std::string& k) {
    const std::string s = get(k, "", true);
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    PACKRAT_CHECK(ec == std::errc() && end == s.data() + s.size(), "fewbit {}: --{} must be an integer, got '{}'",
                  command, k, s);
    return v;
  }
  void check_all_used() const {
    for (const auto& [k, v] : flags)
      PACKRAT_CHECK(used.count(k), "fewbit {}: unknown option --{}", command, k);
  }
};

Args parse(int argc, char** argv) {
  PACKRAT_CHECK(argc >= 2, "fewbit: no command given (table, errors, generate, check-tables, plot-data; see `fewbit help`)");
  Args a;
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    PACKRAT_CHECK(k.rfind("--", 0) == 0 && k.size() > 2, "fewbit {}: expected an option --name, got '{}'", a.command, k);
    PACKRAT_CHECK(i + 1 < argc, "fewbit {}: option {} needs a value", a.command, k);
    a.flags[k.substr(2)] = argv[++i];
  }
  return a;
}

FewbitTableOptions table_options(Args& a) {
  FewbitTableOptions o;
  o.weight = fewbit_weight_by_name(a.get("weight", "uniform"));
  const std::string r = a.get("refine", "true");
  PACKRAT_CHECK(r == "true" || r == "false", "fewbit {}: --refine must be true or false, got '{}'", a.command, r);
  o.refine = r == "true";
  o.A = a.number("A", -10);
  o.B = a.number("B", 10);
  for (const auto& [flag, v] : {std::pair{"A", o.A}, std::pair{"B", o.B}})
    PACKRAT_CHECK(std::isfinite(v) && std::abs(v) <= kFewbitMaxRange,
                  "fewbit {}: --{} is {}, must be a finite number in [{}, {}] (every built-in f' is constant beyond "
                  "|x| = 40)",
                  a.command, flag, v, -kFewbitMaxRange, kFewbitMaxRange);
  PACKRAT_CHECK(o.B > o.A, "fewbit {}: the weight interval [{}, {}] is empty", a.command, o.A, o.B);
  return o;
}

std::vector<FewbitTable> regenerate_all() {
  std::vector<FewbitTable> all;
  for (const auto& f : fewbit_functions()) {
    if (f.step) continue;
    auto t = solve_builtin_tables(f.name, {1, 2, 3, 4});
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

int run(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.command == "help" || a.command == "--help") {
    std::printf("%s\n", kUsage);
    return 0;
  }
  if (a.command == "table") {
    const std::string fn = a.get("fn", "", true);
    const int bits = a.integer("bits");
    const FewbitTableOptions o = table_options(a);
    a.check_all_used();
    std::printf("%s\n", fewbit_table(fn, bits, o).json().c_str());
    return 0;
  }
  if (a.command == "errors") {
    // The paper's Table 3, computed now: each table is solved by the DP solver with the given
    // weight (default: uniform on [-10, 10], as the paper), and eq. 3 is integrated from the
    // solved borders and levels against f'. `shipped_error` is the same integral for the table
    // compiled into packrat (what training uses), so a drifted table shows.
    const FewbitTableOptions o = table_options(a);
    const std::string only = a.get("fn", "");
    a.check_all_used();
    std::printf("fn,bits,error,max_abs_error,shipped_error\n");
    bool found = only.empty();
    for (const auto& f : fewbit_functions()) {
      if (!only.empty() && only != f.name) continue;
      found = true;
      if (f.step) {
        // The relu family's f' is two-valued: one row, the exact 1-bit mask (the paper's Table 1
        // lists ReLU at 1 bit, error 0), integrated like any table.
        FewbitTable mask = exact_step_table(f);
        mask.weight = o.weight, mask.A = o.A, mask.B = o.B;
        std::printf("%s,1,%.6g,%.6g,%.6g\n", std::string(f.name).c_str(), fewbit_table_error(mask, f.df),
                    mask.max_abs_error, fewbit_table_error(fewbit_table(f.name, 1), f.df));
        continue;
      }
      for (const FewbitTable& t : solve_builtin_tables(f.name, {1, 2, 3, 4}, o))
        std::printf("%s,%d,%.6g,%.6g,%.6g\n", std::string(f.name).c_str(), t.bits, fewbit_table_error(t, f.df),
                    t.max_abs_error, fewbit_table_error(fewbit_table(f.name, t.bits), f.df));
    }
    PACKRAT_CHECK(found, "fewbit errors: --fn {} is not a built-in activation", only);
    return 0;
  }
  if (a.command == "generate") {
    const std::string out = a.get("out", "quant/fewbit/fewbit_tables_data.cpp");
    a.check_all_used();
    const std::string src = fewbit_tables_source(regenerate_all());
    std::ofstream f(out);
    PACKRAT_CHECK(f.good(), "fewbit generate: cannot write '{}'", out);
    f << src;
    std::fprintf(stderr, "fewbit generate: wrote %s\n", out.c_str());
    return 0;
  }
  if (a.command == "check-tables") {
    a.check_all_used();
    const auto fresh = regenerate_all();
    const auto& shipped = shipped_fewbit_tables();
    int drifted = 0;
    if (fresh.size() != shipped.size()) {
      std::printf("shipped %zu tables, regeneration made %zu\n", shipped.size(), fresh.size());
      return 1;
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
      std::string why;
      if (!fewbit_tables_match(shipped[i], fresh[i], kFewbitTableReproducibility, &why)) {
        std::printf("drift: %s\n", why.c_str());
        ++drifted;
      }
    }
    std::printf("%zu tables checked, %d drifted\n", fresh.size(), drifted);
    return drifted ? 1 : 0;
  }
  if (a.command == "plot-data") {
    const std::string fn = a.get("fn", "", true);
    const double from = a.number("from", -6), to = a.number("to", 6), step = a.number("step", 0.005);
    a.check_all_used();
    PACKRAT_CHECK(to > from && step > 0 && (to - from) / step < 1e7, "fewbit plot-data: bad range [{}, {}] step {}", from,
                  to, step);
    const FewbitFunction& f = fewbit_function(fn);
    std::vector<const FewbitTable*> tables;
    for (int b = 1; b <= 4; ++b) tables.push_back(&fewbit_table(fn, b));
    std::printf("# x df q1 q2 q3 q4 (%s)\n", fn.c_str());
    for (double x = from; x <= to + 1e-12; x += step) {
      std::printf("%.5f %.7f", x, f.df(x));
      for (const auto* t : tables) std::printf(" %.7f", f.step ? f.df(x) : (*t)(x));
      std::printf("\n");
    }
    return 0;
  }
  fail("fewbit: unknown command '{}' (table, errors, generate, check-tables, plot-data; see `fewbit help`)", a.command);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fewbit: internal error: %s\n", e.what());
    return 3;
  }
}
