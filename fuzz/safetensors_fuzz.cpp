// libFuzzer target: The safetensors reader; the body is safetensors_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::safetensors_target(data, size);
  return 0;
}
