// sweep: runs a sweep file's grid of trainer configs over seeds, resuming finished runs, and
// writes results.csv, report.md and PNG plots (experiments/lib/sweep_file.h for the format).
//   build/bin/sweep experiments/thesis/bitwidth.yaml --scale small
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "experiments/lib/sweep_file.h"
#include "experiments/lib/sweep_report.h"
#include "experiments/lib/sweep_run.h"
#include "experiments/lib/trainer_main.h"

namespace {

const char* kUsage =
    "usage: sweep SWEEP.yaml [--scale small|paper] [--out DIR] [--list] [--report-only] [--stop-after-runs K]\n"
    "              [--rerun] [--quiet]\n"
    "  --scale small|paper   small: Fashion-MNIST and small models, for this machine (default);\n"
    "                        paper: the paper's dataset, model and epochs\n"
    "  --out DIR             where results.csv, report.md, the plots and runs/ go\n"
    "                        (default: <sweep file dir>/results/<sweep name>/<scale>)\n"
    "  --list                check every point's config and print the runs; train nothing\n"
    "  --report-only         rewrite report.md and the plots from results.csv\n"
    "  --stop-after-runs K   stop after K runs (as if killed); a rerun continues\n"
    "  --rerun               replace the runs of points that failed before or whose config has\n"
    "                        changed since their run (without it, such a sweep is refused)\n"
    "  --quiet               no per-epoch lines from the runs\n";

int run(const std::vector<std::string>& args) {
  using namespace packrat;
  std::string file;
  SweepOptions o;
  bool list = false, report_only = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      PACKRAT_CHECK(i + 1 < args.size(), "{} needs a value\n{}", a, kUsage);
      return args[++i];
    };
    if (a == "--scale") o.scale = value();
    else if (a == "--out") o.out = value();
    else if (a == "--list") list = true;
    else if (a == "--report-only") report_only = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--rerun") o.rerun = true;
    else if (a == "--stop-after-runs") {
      const std::string& v = value();
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), o.stop_after_runs);
      PACKRAT_CHECK(ec == std::errc() && end == v.data() + v.size() && o.stop_after_runs > 0,
                    "--stop-after-runs: expected a positive integer, got '{}'", v);
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') fail("unknown argument '{}'\n{}", a, kUsage);
    else {
      PACKRAT_CHECK(file.empty(), "one sweep file, got '{}' and '{}'\n{}", file, a, kUsage);
      file = a;
    }
  }
  PACKRAT_CHECK(!file.empty(), "a sweep file is required\n{}", kUsage);
  const SweepSpec s = load_sweep(file);
  if (list) {
    for (const auto& r : plan_sweep(s, o)) std::printf("%s seed %llu -> %s\n", r.point.id.c_str(),
                                                       static_cast<unsigned long long>(r.seed), r.dir.c_str());
    return 0;
  }
  if (report_only) {
    plan_sweep(s, o);
    const std::string out = sweep_out_dir(s, o);
    PACKRAT_CHECK(std::filesystem::is_regular_file(std::filesystem::path(out) / "results.csv"),
                  "--report-only: {} holds no results.csv to report (run the sweep first)", out);
    write_sweep_report(s, sweep_out_dir(s, o), o.scale);
    std::printf("wrote %s/report.md\n", sweep_out_dir(s, o).c_str());
    return 0;
  }
  const SweepOutcome r = run_sweep(s, o);
  std::printf("sweep %s: %lld runs, %lld done before, %lld run now%s\n", s.name.c_str(), static_cast<long long>(r.runs),
              static_cast<long long>(r.done_before), static_cast<long long>(r.ran),
              r.complete ? "" : " (incomplete: run the same command again to continue)");
  if (r.complete) std::printf("wrote %s/results.csv and %s/report.md\n", r.out_dir.c_str(), r.out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  packrat::prefer_short_openmp_spinning(argv);
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const packrat::Error& e) {
    std::fprintf(stderr, "sweep: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sweep: error: %s\n", e.what());
    return 1;
  }
}
