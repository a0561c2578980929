// The CUDA pointwise section's bodies (core/cuda/kernels/pointwise.h) run on the host with
// run_on_host, against the CPU backend: every activation's f, f' (from x and, where offered, from
// y) and the fused grad * f', bit for bit (the same math, core/pointwise_math.h, the same compiler).
// A GPU runs these bodies through launch_for_each; only it can check nvcc's code (the backend
// tests do once the CUDA backend is complete).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/pointwise.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::run_on_host;
using testing::run_quads_on_host;

// Bitwise equality, reporting the first few misses; any NaN matches any NaN (the scalar and the
// vectorised code may give a NaN input's result another sign bit).
void expect_same_bits(const std::vector<float>& got, const Tensor& want_t, const std::string& what) {
  const std::vector<float> want = want_t.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size() && misses < 5; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the CPU backend's " << want[i];
      ++misses;
    }
}

// An odd-sized input covering each activation's branches: a dense range, the kinks and
// thresholds (0, +-3, 6, 20), huge values, infinities and NaN.
Tensor pointwise_input() {
  DeviceScope on_cpu(Device::cpu());
  const Tensor r = host_random({1001}, 7, -25.0f, 25.0f);
  std::vector<float> v = r.to_vector();
  for (float s : {0.0f, -0.0f, 3.0f, -3.0f, 6.0f, 20.0f, -20.0f, 0.625f, 44.0f, 90.0f, -90.0f, 1e30f, -1e30f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    v.push_back(s);
  return Tensor::from_vector(Shape{static_cast<int64_t>(v.size())}, v);
}

TEST(CudaKernelsPointwise, EveryActivationBodyMatchesTheCpuBackendBitForBit) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const Tensor x = pointwise_input();
  const int64_t n = x.numel();
  const Tensor g = host_random({n}, 8);
  const float* xp = x.data<float>();
  const float* gp = g.data<float>();
  int from_output_ids = 0;
  for (int k = 0; k < kNumActivations; ++k) {
    const auto id = static_cast<ActivationId>(k);
    const std::string name(activation_name(id));
    std::vector<float> y(static_cast<size_t>(n)), d(y.size()), gx(y.size());
    with_activation(id, [&](auto a) {
      using A = decltype(a);
      run_quads_on_host(n, cuda::PointwiseForwardBody<A>{xp, y.data(), n});
      run_on_host(n, cuda::PointwiseDerivativeBody<A, false>{xp, d.data()});
      run_quads_on_host(n, cuda::PointwiseBackwardBody<A, false>{xp, gp, gx.data(), n});
    });
    expect_same_bits(y, cpu.pointwise_forward(id, x), name + " f");
    expect_same_bits(d, cpu.pointwise_derivative(id, x, false), name + " f'");
    expect_same_bits(gx, cpu.pointwise_backward(id, x, g, false), name + " grad f'");
    if (!derivative_from_output_exists(id)) continue;
    ++from_output_ids;
    const Tensor yt = Tensor::from_vector(Shape{n}, y);
    with_activation(id, [&](auto a) {
      using A = decltype(a);
      if constexpr (A::kFromOutput) {
        run_on_host(n, cuda::PointwiseDerivativeBody<A, true>{yt.data<float>(), d.data()});
        run_quads_on_host(n, cuda::PointwiseBackwardBody<A, true>{yt.data<float>(), gp, gx.data(), n});
      }
    });
    expect_same_bits(d, cpu.pointwise_derivative(id, yt, true), name + " f' from y");
    expect_same_bits(gx, cpu.pointwise_backward(id, yt, g, true), name + " grad f' from y");
  }
  EXPECT_EQ(from_output_ids, 3);  // relu, sigmoid, tanh
}

}  // namespace
}  // namespace packrat
