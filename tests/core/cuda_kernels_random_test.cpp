// The CUDA random section's bodies (core/cuda/kernels/random.h) run on the host with
// run_on_host, against the CPU backend bit for bit: dropout (one body per Philox counter, four
// elements 64 apart) gives exactly the CPU's mask and values, masked scaling, and the uniform and
// normal fills. (On a GPU the normal fill's log / cos / sin are CUDA's, within 2 ulp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/random.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::run_on_host;

constexpr float kUnset = std::numeric_limits<float>::quiet_NaN();  // marks elements no body wrote

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(CudaKernelsRandom, DropoutBodyGivesTheCpuMaskAndValuesBitForBit) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const float p = 0.3f, scale = 1.0f / (1.0f - p);
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{7001}}) {  // whole and partial blocks
    const Tensor x = host_random({n}, 21);
    Tensor cpu_mask;
    const Tensor cpu_y = cpu.dropout_forward(x, p, scale, 1234, 5, &cpu_mask);
    std::vector<float> y(static_cast<size_t>(n), kUnset);
    std::vector<uint8_t> mask(static_cast<size_t>(n), 7);
    const int64_t counters = DropoutPhilox::counters(n);
    EXPECT_EQ(counters % DropoutPhilox::kLanes, 0);
    run_on_host(counters, cuda::DropoutBody{x.data<float>(), y.data(), mask.data(), n, p, scale, 1234, 5});
    const float* want = cpu_y.data<float>();
    const uint8_t* want_mask = cpu_mask.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_bits(y[i], want[i])) << "n " << n << " element " << i << ": " << y[i] << " vs " << want[i];
      ASSERT_EQ(mask[i], want_mask[i]) << "n " << n << " element " << i;
    }
    // Without a mask: the same values.
    std::vector<float> y2(static_cast<size_t>(n), kUnset);
    run_on_host(counters, cuda::DropoutBody{x.data<float>(), y2.data(), nullptr, n, p, scale, 1234, 5});
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(y2[i], want[i])) << "no mask, element " << i;
  }
}

TEST(CudaKernelsRandom, MaskScaleBodyMatchesTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const int64_t n = 1003;
  const Tensor g = host_random({n}, 22);
  Tensor mask = Tensor::empty({n}, DType::u8);
  for (int64_t i = 0; i < n; ++i) mask.data<uint8_t>()[i] = (i * 7) % 3 == 0 ? 1 : 0;
  std::vector<float> out(static_cast<size_t>(n), kUnset);
  run_on_host(n, cuda::MaskScaleBody{g.data<float>(), mask.data<uint8_t>(), out.data(), 1.75f});
  const Tensor want = cpu.mask_scale(g, mask, 1.75f);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], want.data<float>()[i])) << i;
}

TEST(CudaKernelsRandom, FillBodiesGiveTheCpuUniformAndNormalValues) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  for (int64_t n : {int64_t{1}, int64_t{30}, int64_t{4001}}) {  // partial last blocks
    const int64_t blocks = fill_blocks_for(n);
    Tensor u = Tensor::empty({n}), nrm = Tensor::empty({n});
    EXPECT_EQ(cpu.fill_uniform(u, -1.0f, 3.0f, 42, 7, 100), blocks);
    EXPECT_EQ(cpu.fill_normal(nrm, 1.0f, 2.0f, 42, 8, 5), blocks);
    std::vector<float> got_u(static_cast<size_t>(n), kUnset), got_n(static_cast<size_t>(n), kUnset);
    run_on_host(blocks, cuda::FillBody<false>{got_u.data(), n, -1.0f, 3.0f, 42, 7, 100});
    run_on_host(blocks, cuda::FillBody<true>{got_n.data(), n, 1.0f, 2.0f, 42, 8, 5});
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_bits(got_u[i], u.data<float>()[i])) << "uniform, n " << n << " element " << i;
      ASSERT_TRUE(same_bits(got_n[i], nrm.data<float>()[i])) << "normal, n " << n << " element " << i;
    }
  }
}

}  // namespace
}  // namespace packrat
