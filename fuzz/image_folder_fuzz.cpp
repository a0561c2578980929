// libFuzzer target: The image-folder reader; the body is image_folder_target in fuzz/targets.h.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packrat::fuzz::image_folder_target(data, size);
  return 0;
}
