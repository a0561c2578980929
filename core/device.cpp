#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace packrat {

namespace {
thread_local Device t_device = Device::cpu();
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0 && index < 1024)
      return cuda(index);
  }
  fail("unknown device '{}': expected cpu, cuda or cuda:N", text);
}

DeviceScope::DeviceScope(Device device) : previous_(t_device) { t_device = device; }
DeviceScope::~DeviceScope() { t_device = previous_; }
Device DeviceScope::current() { return t_device; }

}  // namespace packrat
