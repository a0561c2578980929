#include "quant/codec_device.h"

#include "core/error.h"

namespace packrat {

void check_codec_device(std::string_view codec, Device d, std::string_view what) {
  if (d.is_cpu()) return;
  fail("{}: CUDA compression kernels are not built yet (issue 11), so nothing is compressed on {}: {}", codec, d.str(),
       what);
}

}  // namespace packrat
