// trainer --config FILE [--set key=value ...] [--resume RUN_DIR] [--memory-report-only]
//         [--benchmark STEPS] [--find-max-batch BYTES] [--stop-after-epoch N] [--overwrite]
// Exit codes: 0 done, 2 bad input (config, data, arguments, out of memory, non-finite loss), 1 other failures.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/error.h"
#include "experiments/lib/cli.h"

// On a machine shared with other jobs, OpenMP threads that spin at barriers while a sibling
// thread is descheduled slow every step several times over (quickstart --benchmark 20 on the
// shared 2-core machine: 634-1208 img/s passive against 109-387 img/s with libgomp's default
// spinning). libgomp reads OMP_WAIT_POLICY only when it is loaded, so the trainer re-executes
// itself once with OMP_WAIT_POLICY=passive unless the caller chose a policy.
static void prefer_passive_openmp_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default policy
}

int main(int argc, char** argv) {
  prefer_passive_openmp_waiting(argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("trainer"));
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    return packrat::run_trainer(packrat::parse_trainer_args({argv + 1, argv + argc}));
  } catch (const packrat::Error& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: internal error: %s\n", e.what());
    return 1;
  }
}
