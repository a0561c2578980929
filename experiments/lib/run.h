#pragma once
// A training run: datasets and loaders, the epoch loop with progress, evaluation, metrics,
// the memory report of the first step, checkpoints, and resuming.
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/lib/config.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/metrics.h"

namespace packrat {

struct DataParallel;  // experiments/lib/distributed_run.h

struct RunOptions {
  bool resume = false;          // continue from the latest checkpoint in config.output.dir
  bool overwrite = false;       // a fresh run may replace an earlier run in config.output.dir
  int64_t stop_after_epoch = 0; // stop (as if interrupted) once this many epochs are done; 0: never
  int tty = -1;                 // progress bar: -1 = isatty(stderr), 0 = plain lines, 1 = bar
  bool print_report = true;     // print the memory report table to stdout
  DataParallel* dp = nullptr;   // under mpirun: this rank's shard; rank 0 writes the run directory
  bool log_file = false;        // log to <dir>/train.log too (from the first write into the directory)
  // Files written beside config.yaml once every check has passed (name, contents): plan.json.
  std::vector<std::pair<std::string, std::string>> extra_files;
};

struct RunResult {
  std::string run_dir;
  std::vector<EpochMetrics> epochs;  // the epochs run by this call
  MemoryReport report;               // of this call's first step
  int64_t start_epoch = 0;           // epochs already done when it started (resume)
};

// Checks everything first, the directory (check_output_dir: a fresh run refuses one holding an
// earlier run unless o.overwrite), the data, the model and, resuming, the checkpoint and the
// metrics; only then changes the run directory (a refused run leaves it as it was). Writes <dir>/config.yaml (the resolved config), train.log, metrics.csv/jsonl,
// memory_report.json, checkpoints/epoch_NNNN.safetensors, and gact_bits.csv when a GACT store
// is used.
RunResult run_training(const Config& c, const RunOptions& o = {});

// Throws naming both keys when output.dir is data.root or inside it for a dataset that reads every
// file under its root (text, image_folder): the run would read its own files as data.
void check_output_outside_data(const Config& c);

}  // namespace packrat
