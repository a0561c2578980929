// libFuzzer target: The tar/gzip reader; the body is tar_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::tar_target(data, size);
  return 0;
}
