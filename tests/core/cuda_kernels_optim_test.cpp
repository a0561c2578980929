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

// The multi-tensor SGD kernel, replayed block by block and thread by thread: every tensor of a
// set larger than one table (empty ones, one smaller than a chunk, several chunks with a ragged
// end, some without momentum) takes the CPU backend's step bit for bit, and no block touches
// anything else.
TEST(CudaKernelsOptim, MultiTensorSgdStepsEveryTensorAsTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const Backend::SgdStep step{0.1f, 0.01f, 0.9f, 0.1f, false, false};
  const int count = cuda::kSgdTableTensors + 7;
  std::vector<Tensor> want_p, want_b, got_p, got_b, grads;
  std::vector<cuda::SgdTensor> rows;
  for (int k = 0; k < count; ++k) {
    const int64_t n = k % 9 == 4 ? 0 : k % 5 == 0 ? 3 * cuda::kSgdChunk + 17 : 1 + 97 * k;
    const bool momentum = k % 4 != 3, first = k % 3 == 0;
    const uint64_t seed = 100 + 3 * static_cast<uint64_t>(k);
    grads.push_back(host_random({n}, seed));
    want_p.push_back(host_random({n}, seed + 1));
    got_p.push_back(want_p.back().clone());
    want_b.push_back(momentum ? host_random({n}, seed + 2) : Tensor());
    got_b.push_back(momentum ? want_b.back().clone() : Tensor());
    Backend::SgdStep s = step;
    s.first = first;
    if (!momentum) s.momentum = 0;
    cpu.sgd_update(want_p.back(), grads.back(), want_b.back(), s);
    rows.push_back({got_p.back().data<float>(), grads.back().data<float>(),
                    momentum ? got_b.back().data<float>() : nullptr, n, first});
  }
  cuda::SgdManyBody body{{}, step.lr, step.weight_decay, step.momentum, 1.0f - step.dampening, step.nesterov};
  int tables = 0;
  for (int done = 0; done < count; ++tables) {
    done += cuda::fill_sgd_table(body.table, rows.data() + done, count - done);
    for (int64_t b = 0; b < body.table.first_block[body.table.count]; ++b)
      for (int t = 0; t < 256; ++t) body.block(b, t, 256);
  }
  EXPECT_EQ(tables, 2);
  for (int k = 0; k < count; ++k) {
    expect_same_bits(got_p[k], want_p[k], "tensor " + std::to_string(k));
    if (want_b[k].defined()) expect_same_bits(got_b[k], want_b[k], "buffer " + std::to_string(k));
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
