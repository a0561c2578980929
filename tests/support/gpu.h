#pragma once
// Whether the tests have a GPU, and the one-line skip every GPU-only test takes without one
// (tests compile always; without a GPU the whole suite still passes).
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/build_config.h"

namespace packrat::testing {

// The first GPU's backend, or null when none is visible (or CUDA was not built).
inline Backend* first_gpu() {
  for (Backend* b : available_backends())
    if (!b->device().is_cpu()) return b;
  return nullptr;
}
inline bool gpu_visible() { return first_gpu() != nullptr; }
inline const char* no_gpu_reason() { return PACKRAT_HAVE_CUDA ? "no GPU is visible" : "built without CUDA"; }

}  // namespace packrat::testing

#define PACKRAT_SKIP_WITHOUT_GPU() \
  if (!::packrat::testing::gpu_visible()) GTEST_SKIP() << ::packrat::testing::no_gpu_reason()
