#include "quant/codec/codec_device.h"

#include <atomic>

#include "core/error.h"

namespace packrat {

namespace {
std::atomic<HostCodecOverride*> g_override{nullptr};  // set_codec_override
}  // namespace

void check_codec_device(std::string_view codec, Device d, std::string_view what) {
  if (d.is_cpu()) return;
  fail("{}: this scheme's codec has no GPU kernels, so nothing is compressed on {}: {}", codec, d.str(), what);
}

void set_codec_override(HostCodecOverride* o) {
  PACKRAT_CHECK(o == nullptr || !o->device().is_cpu(), "set_codec_override: the CPU cannot be overridden");
  g_override = o;
}

bool codec_ran_on_host(Device d, std::initializer_list<Tensor> operands, const std::function<void()>& kernel) {
  HostCodecOverride* o = g_override.load(std::memory_order_acquire);
  if (o == nullptr || o->device() != d) return false;
  o->run_on_host(operands, kernel);
  return true;
}

}  // namespace packrat
