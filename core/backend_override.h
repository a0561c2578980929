#pragma once
// Tests only (tests/support/emulated_gpu.h): serve `device`, a GPU index no machine has, with `b`
// (nullptr: stop); backend(device) and Allocator::of(device) then return it and its allocator.
#include "core/backend.h"

namespace packrat {

void set_backend_override(Device device, Backend* b);

}  // namespace packrat
