#include "experiments/lib/trainer_main.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "experiments/lib/cli.h"

namespace packrat {

std::vector<std::pair<std::string, std::string>> openmp_waiting_defaults(const char* wait_policy, const char* spin_count) {
  if (wait_policy != nullptr || spin_count != nullptr) return {};  // the caller chose
  return {{"OMP_WAIT_POLICY", "passive"}, {"GOMP_SPINCOUNT", std::to_string(kOpenmpSpinCount)}};
}

void prefer_short_openmp_spinning(char** argv) {
  const auto set = openmp_waiting_defaults(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"));
  if (set.empty()) return;
  for (const auto& [name, value] : set) ::setenv(name.c_str(), value.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default policy
}

int run_trainer(int argc, char** argv) {
  prefer_short_openmp_spinning(argv);
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
