// libFuzzer target: The config parser with --set overrides; the body is config_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::config_target(data, size);
  return 0;
}
