#pragma once
// The trainer's command line: parsing and dispatch to a training run or a measuring mode.
#include <cstdint>
#include <string>
#include <vector>

namespace packrat {

struct TrainerArgs {
  std::string config;                // --config FILE
  std::vector<std::string> sets;     // --set key=value (repeatable)
  std::string resume;                // --resume RUN_DIR
  bool memory_report_only = false;   // --memory-report-only (--memory-timeline sets it too)
  bool memory_timeline = false;      // --memory-timeline: the report's step, its allocator events recorded
  int64_t benchmark_steps = 0;       // --benchmark STEPS
  std::vector<std::string> vs_sets;  // --vs key=value (repeatable): --benchmark against the config so changed
  int64_t max_batch_bytes = 0;       // --find-max-batch BYTES (suffixes K, M, G: powers of 1024)
  int64_t gradient_fidelity = 0;     // --gradient-fidelity N (draws)
  int64_t stop_after_epoch = 0;      // --stop-after-epoch N
  bool overwrite = false;            // --overwrite: replace an earlier run in output.dir
  bool help = false;
};

std::string trainer_usage();
// Throws packrat::Error on a malformed command line.
TrainerArgs parse_trainer_args(const std::vector<std::string>& argv);
int64_t parse_byte_size(const std::string& s, const std::string& flag);  // "8G", "512M", "123456"

// Runs what the arguments ask for; returns the process exit code. Errors propagate.
int run_trainer(const TrainerArgs& a);

}  // namespace packrat
