#pragma once
// trainer --benchmark STEPS --vs KEY=VALUE: a config's training step against a second config's
// (the same file with the --vs overrides on top), both sessions in one process and their timed
// steps taken in turn (A B, B A, A B, ...), so that a change in the machine's load meets both
// sides alike. On the shared 2-core machines, the step of efficientnet_fmnist_2bit and of its
// FP32-store twin run back to back as two processes gave ratios from 0.66 to 0.87 within an hour.
#include <cstdint>

#include "experiments/lib/config.h"
#include "experiments/lib/json.h"
#include "experiments/lib/tools.h"

namespace packrat {

struct PairedBenchmark {
  // Each side's figures, its img/s from its own steps' time. Both sessions live in the process,
  // so a side's peak_bytes is not its own and is left out of the JSON.
  BenchmarkResult config, vs;
  // The config's speed over vs's (vs's summed step time over the config's), and that ratio step pair
  // by step pair: its median, lowest and highest.
  double speed_vs = 0, pair_median = 0, pair_min = 0, pair_max = 0;
  // {"config": {config's benchmark JSON without peak_bytes}, "vs": {...}, "speed_vs": X,
  //  "pair_median": M, "pair_min": L, "pair_max": H}
  Json json() const;
};

// Throws packrat::Error when the two configs cannot share a process: another device or another
// thread count (the process's settings), or memory.plan: auto (give the plan's option).
PairedBenchmark benchmark_pair(const Config& a, const Config& b, int64_t steps);

}  // namespace packrat
