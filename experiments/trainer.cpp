// trainer --config FILE [--set key=value ...] [--resume RUN_DIR] [--memory-report-only]
//         [--benchmark STEPS] [--find-max-batch BYTES]
// Exit codes: 0 done, 2 bad input (config, data, arguments, out of memory, non-finite loss), 1 other failures.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "experiments/lib/cli.h"

int main(int argc, char** argv) {
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
