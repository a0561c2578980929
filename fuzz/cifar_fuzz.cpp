// libFuzzer target: The CIFAR-10 and CIFAR-100 readers; the body is cifar_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::cifar_target(data, size);
  return 0;
}
