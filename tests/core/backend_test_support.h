#pragma once
// The backend test's harness (ggml's test-backend-ops is the model): each primitive runs on
// every available backend, inputs copied to its device, and its output is compared on the host
// with a slow, obviously-correct scalar reference written in the test. With only the CPU built
// it checks the CPU backend; a CUDA build covers CUDA with no new test code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"

namespace packrat::testing {

// A host tensor of deterministic values in [lo, hi).
inline Tensor host_random(const Shape& shape, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint32_t r[4];
    Philox4x32::generate(seed, 0, static_cast<uint64_t>(i), r);
    p[i] = lo + (hi - lo) * Philox4x32::to_uniform(r[0]);
  }
  return t;
}

// The tensor's logical values on the host, whatever its device and layout.
inline std::vector<float> host_values(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// |got - want| <= atol + rtol * |want| elementwise; reports the first few misses.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rtol, float atol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size() && misses < 5; ++i) {
    const bool ok = std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]) ||
                    (std::isnan(got[i]) && std::isnan(want[i]));
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", reference " << want[i];
      ++misses;
    }
  }
}

}  // namespace packrat::testing

// for (Backend* b : ...) over every available backend, with the backend's name in every failure message.
#define PACKRAT_FOR_EACH_BACKEND(b)                              \
  for (::packrat::Backend* b : ::packrat::available_backends()) \
    if (const ::testing::ScopedTrace trace_(__FILE__, __LINE__, b->name()); true)
