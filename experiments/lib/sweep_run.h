#pragma once
// Running a sweep (experiments/lib/sweep_file.h): every point's config is validated before any
// run; each (point, seed) trains in <out>/runs/<point>/seed<k>/ and is marked done there
// (sweep_done); a rerun skips the done runs, resumes a run that has a checkpoint and restarts one
// that has none, so an interrupted sweep continues and ends with the same results.csv.
// An earlier run counts only if its config.yaml is the config the point resolves to now; a run
// that failed is marked (sweep_failed, with the error) and kept. Either refuses the sweep, naming
// the point, until --rerun (SweepOptions::rerun). The output directory is locked (DirectoryLock)
// while the sweep runs.
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/lib/config.h"
#include "experiments/lib/sweep_file.h"

namespace packrat {

struct SweepOptions {
  std::string scale = "small";
  std::string out;            // "" = <sweep file dir>/results/<sweep name>/<scale>
  int64_t stop_after_runs = 0;  // stop (as if killed) after this many runs done by this call; 0: never
  bool quiet = false;           // no progress lines from the runs
  // Replace the runs of points that failed in an earlier sweep or whose resolved config changed
  // since their run was made; without it such a sweep is refused before anything is written.
  bool rerun = false;
};

struct SweepRun {
  SweepPoint point;
  uint64_t seed = 0;
  std::string dir;
  Config config;
};

// Every run's resolved config, checked (config keys and values, the store schemes and their
// options, the model architecture). Throws naming the sweep file, the point and the key.
std::vector<SweepRun> plan_sweep(const SweepSpec& s, const SweepOptions& o);

std::string sweep_out_dir(const SweepSpec& s, const SweepOptions& o);

// One row per run, computed from its run directory (metrics.csv, gradient_fidelity.json).
std::vector<std::string> results_csv_header(const SweepSpec& s);
std::string results_csv_row(const SweepSpec& s, const SweepRun& r);

struct SweepOutcome {
  int64_t runs = 0, done_before = 0, ran = 0;
  bool complete = false;        // every run done (results.csv, report.md and plots written)
  std::string out_dir;
};
SweepOutcome run_sweep(const SweepSpec& s, const SweepOptions& o);

}  // namespace packrat
