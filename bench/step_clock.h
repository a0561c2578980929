#pragma once
// Wall-clock and whole-process CPU time for the TrainStep benchmarks. Google Benchmark's own CPU
// time is the main thread's; the process clock also counts the OpenMP workers, so a 2-thread step
// that spins at barriers pays for it here. (Its MeasureProcessCPUTime() would do the same but
// renames the benchmark; the names stay "TrainStep/<model>/<batch>".)
#include <time.h>

#include <chrono>

namespace packrat::bench {

struct StepClock {
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = process_cpu_seconds();

  static double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  double wall_seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(); }
  double cpu_seconds() const { return process_cpu_seconds() - cpu0; }
};

}  // namespace packrat::bench
