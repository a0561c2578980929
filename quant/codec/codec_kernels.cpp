#include "quant/codec/codec_kernels.h"

#include <atomic>

#include "core/build_config.h"
#include "core/error.h"
#include "quant/cpu/cpu_codecs.h"
#if PACKRAT_HAVE_CUDA
#include "quant/cuda/cuda_codecs.h"
#endif

namespace packrat {

namespace {
struct Override {
  std::atomic<CodecKernels*> kernels{nullptr};
  Device device = Device::cpu();
};
Override g_override;  // set_codecs: one test device at a time
}  // namespace

CodecKernels& codecs(Device d, std::string_view what) {
  if (d.is_cpu()) return cpu_codecs();
  if (CodecKernels* k = g_override.kernels.load(std::memory_order_acquire); k && g_override.device == d) return *k;
#if PACKRAT_HAVE_CUDA
  return cuda_codecs();
#else
  fail("{} is on {}, but this packrat was built without CUDA", what, d.str());
#endif
}

void set_codecs(Device d, CodecKernels* k) {
  PACKRAT_CHECK(!d.is_cpu(), "set_codecs: the CPU's codecs cannot be replaced");
  g_override.kernels = nullptr;
  g_override.device = d;
  g_override.kernels = k;
}

void check_codec_device(std::string_view codec, Device d, std::string_view what) {
  if (d.is_cpu()) return;
  fail("{}: this scheme's codec has no GPU kernels, so nothing is compressed on {}: {}", codec, d.str(), what);
}

}  // namespace packrat
