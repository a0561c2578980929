// libFuzzer target: The IDX reader; the body is idx_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::idx_target(data, size);
  return 0;
}
