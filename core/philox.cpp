#include "core/philox.h"

#include <algorithm>
#include <cmath>

namespace packrat {

float PhiloxStream::normal() {
  const float u1 = std::max(uniform(), 1e-7f), u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647f * u2);
}

void PhiloxStream::set_state(const std::array<uint64_t, 4>& s) {
  seed_ = s[0];
  stream_ = s[1];
  counter_ = s[2];
  used_ = 4;
  if (s[3] < 4 && counter_ > 0) {  // regenerate the partly used block
    Philox4x32::generate(seed_, stream_, counter_ - 1, buf_);
    used_ = static_cast<uint32_t>(s[3]);
  }
}

}  // namespace packrat
