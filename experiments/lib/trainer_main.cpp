#include "experiments/lib/trainer_main.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "experiments/lib/cli.h"

namespace packrat {

// On a machine shared with other jobs, OpenMP threads that spin at barriers while a sibling
// thread is descheduled slow every step several times over (quickstart --benchmark 20 on the
// shared 2-core machine: 634-1208 img/s passive against 109-387 img/s with libgomp's default
// spinning). libgomp reads OMP_WAIT_POLICY only when it is loaded, so the trainer re-executes
// itself once with OMP_WAIT_POLICY=passive unless the caller chose a policy.
void prefer_passive_openmp_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default policy
}

int run_trainer(int argc, char** argv) {
  prefer_passive_openmp_waiting(argv);
  const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "trainer";
  if (!spdlog::get(program)) spdlog::set_default_logger(spdlog::stderr_color_mt(program));
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    return run_trainer(parse_trainer_args({argv + 1, argv + argc}));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program.c_str(), e.what());
    return 1;
  }
}

}  // namespace packrat
