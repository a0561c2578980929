// The CUDA optimizer section's bodies (core/cuda/kernels/optim.h) run on the host with
// run_on_host, against the CPU backend bit for bit: SGD without momentum, with momentum (first
// and later steps, dampening, Nesterov, weight decay) and two AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/optim.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::run_on_host;

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), got.nbytes()), 0) << what;
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", the CPU backend's " << w[i];
      break;
    }
}

TEST(CudaKernelsOptim, SgdBodiesMatchTheCpuBackendBitForBit) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const int64_t n = 1001;
  const Tensor p0 = host_random({n}, 31), g = host_random({n}, 32), b0 = host_random({n}, 33);
  struct Case {
    float momentum, dampening, wd;
    bool nesterov, first;
  };
  for (const Case& c : {Case{0, 0, 0.01f, false, false}, Case{0.9f, 0, 0.01f, false, true},
                        Case{0.9f, 0.1f, 0.0f, false, false}, Case{0.9f, 0, 0.001f, true, false}}) {
    const std::string what = "sgd momentum " + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : "") +
                             (c.first ? " first" : "");
    const Backend::SgdStep step{0.1f, c.wd, c.momentum, c.dampening, c.nesterov, c.first};
    Tensor want_p = p0.clone(), got_p = p0.clone();
    Tensor want_b = c.momentum == 0 ? Tensor() : b0.clone(), got_b = c.momentum == 0 ? Tensor() : b0.clone();
    cpu.sgd_update(want_p, g, want_b, step);
    if (c.momentum == 0) {
      run_on_host(n, cuda::SgdBody{got_p.data<float>(), g.data<float>(), step.lr, step.weight_decay});
    } else {
      run_on_host(n, cuda::SgdMomentumBody{got_p.data<float>(), g.data<float>(), got_b.data<float>(), step.lr,
                                           step.weight_decay, step.momentum, 1.0f - step.dampening, step.nesterov,
                                           step.first});
      expect_same_bits(got_b, want_b, what + " buffer");
    }
    expect_same_bits(got_p, want_p, what);
  }
}

TEST(CudaKernelsOptim, AdamWBodyMatchesTheCpuBackendBitForBit) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const int64_t n = 1001;
  Tensor want_p = host_random({n}, 34), want_m = Tensor::zeros({n}), want_v = Tensor::zeros({n});
  Tensor got_p = want_p.clone(), got_m = want_m.clone(), got_v = want_v.clone();
  for (int t = 1; t <= 2; ++t) {
    const Tensor g = host_random({n}, 35 + static_cast<uint64_t>(t));
    Backend::AdamWStep s;
    s.decay = 1.0f - 1e-2f * 0.05f;
    s.beta1 = 0.9f;
    s.beta2 = 0.999f;
    s.step_size = static_cast<float>(1e-2 / (1 - std::pow(0.9, t)));
    s.bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(0.999, t)));
    s.eps = 1e-8f;
    cpu.adamw_update(want_p, g, want_m, want_v, s);
    run_on_host(n, cuda::AdamWBody{got_p.data<float>(), g.data<float>(), got_m.data<float>(), got_v.data<float>(),
                                   s.decay, s.beta1, s.beta2, s.step_size, s.bc2_sqrt, s.eps});
    const std::string what = "adamw step " + std::to_string(t);
    expect_same_bits(got_p, want_p, what + " p");
    expect_same_bits(got_m, want_m, what + " m");
    expect_same_bits(got_v, want_v, what + " v");
  }
}

}  // namespace
}  // namespace packrat
