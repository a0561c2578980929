// GACT with gradients on a GPU, on the emulated GPU (tests/support/emulated_gpu.h: its tensors
// refuse host access, so any data<T>() left on a device tensor throws): the measured
// estimator's sensitivities and the bit allocation from GPU gradients equal those from the same
// CPU gradients; the sampling variance and its checkpointed state too, and a store restored from
// that state continues bit-identically on the GPU; per-sample gradient norms (the analytic
// estimator's) come from the device. The quantized tensors themselves still go through the
// per-group store on the CPU here: a store that compresses on the GPU is the device-aware
// store's part (CompressingStore refuses other devices until then).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/group/gact_store.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/gact_toy.h"
#include "tests/support/gpu.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::EmulatedGpu;
using testing::toy_options;
using testing::ToyNet;

std::vector<Tensor> on(Device d, const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(d));
  return out;
}

TEST(GactDevice, MeasuredSensitivitiesAndBitsFromGpuGradientsEqualTheCpus) {
  EmulatedGpu gpu;
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  GactPolicy cpu_policy(o), gpu_policy(o);
  cpu_policy.begin_step(0);
  gpu_policy.begin_step(0);
  ASSERT_TRUE(cpu_policy.gact().refresh(0, [&] { return net.grads(cpu_policy); }));
  ASSERT_TRUE(gpu_policy.gact().refresh(0, [&] {
    const std::vector<Tensor> g = on(EmulatedGpu::device(), net.grads(gpu_policy));
    EXPECT_FALSE(g[0].is_cpu());
    return g;
  }));
  const auto& a = cpu_policy.gact().tensors();
  const auto& b = gpu_policy.gact().tensors();
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_GT(a[l].sensitivity, 0.0);
    EXPECT_EQ(b[l].sensitivity, a[l].sensitivity) << "tensor " << l;
    EXPECT_EQ(b[l].bits, a[l].bits) << "tensor " << l;
  }
  EXPECT_GT(b[1].bits, b[0].bits);  // the sensitive branch, as on the CPU
  EXPECT_EQ(gpu_policy.gact().predicted_variance(), cpu_policy.gact().predicted_variance());
}

TEST(GactDevice, SamplingVarianceAndItsCheckpointFromGpuGradientsEqualTheCpus) {
  EmulatedGpu gpu;
  const Device d = EmulatedGpu::device();
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  GactPolicy cpu_policy(o), gpu_policy(o);
  Fp32Policy fp32;
  auto observe = [&](int k, GactStore& on_gpu, GactStore* on_cpu) {
    net.xa = testing::random_tensor({16, 64}, 300 + static_cast<uint64_t>(k));
    const std::vector<Tensor> g = net.grads(fp32);
    on_gpu.observe_gradients(on(d, g));
    if (on_cpu) on_cpu->observe_gradients(g);
  };
  for (int k = 0; k < 3; ++k) observe(k, gpu_policy.gact(), &cpu_policy.gact());
  ASSERT_TRUE(std::isfinite(cpu_policy.gact().sampling_variance()));
  EXPECT_GT(cpu_policy.gact().sampling_variance(), 0.0);
  EXPECT_EQ(gpu_policy.gact().sampling_variance(), cpu_policy.gact().sampling_variance());
  const int64_t mean_bytes = 2 * 8 * 64 * 4;  // the running mean of both weight gradients, f32
  EXPECT_EQ(gpu.allocator().current(MemTag::OptimizerState), mean_bytes) << "the running mean lives on the GPU";
  const testing::GactState saved = gpu_policy.gact().export_state();  // the running mean comes from the device
  EXPECT_TRUE(testing::same_state(saved, cpu_policy.gact().export_state()));

  // Restored from the host state, a store continues on the GPU exactly as the one it came from.
  GactPolicy resumed(o);
  resumed.gact().import_state(saved, "test");
  for (int k = 3; k < 6; ++k) {
    observe(k, gpu_policy.gact(), &cpu_policy.gact());
    net.xa = testing::random_tensor({16, 64}, 300 + static_cast<uint64_t>(k));
    resumed.gact().observe_gradients(on(d, net.grads(fp32)));
  }
  EXPECT_EQ(gpu.allocator().current(MemTag::OptimizerState), 2 * mean_bytes) << "the restored mean moved to the GPU";
  EXPECT_EQ(resumed.gact().sampling_variance(), gpu_policy.gact().sampling_variance());
  EXPECT_TRUE(testing::same_state(resumed.gact().export_state(), gpu_policy.gact().export_state()));
  EXPECT_EQ(gpu_policy.gact().sampling_variance(), cpu_policy.gact().sampling_variance());
}

TEST(GactDevice, PerSampleGradientNormsComeFromTheDevice) {
  EmulatedGpu gpu;
  for (const Shape& s : {Shape{4, 8, 5, 3}, Shape{6, 33}, Shape{17}}) {
    const Tensor g = testing::random_tensor(s, 7, -2.0f, 2.0f);
    const std::vector<double> host = per_sample_sq_norms(g);
    const std::vector<double> device = sample_sq_norms(g.to(EmulatedGpu::device()));
    ASSERT_EQ(device.size(), host.size()) << s.str();
    for (size_t n = 0; n < host.size(); ++n) {
      EXPECT_GT(host[n], 0.0);
      EXPECT_NEAR(device[n], host[n], 1e-6 * host[n]) << s.str() << " sample " << n;  // f32 squares, double sums
    }
    EXPECT_EQ(sample_sq_norms(g), host) << "a CPU tensor keeps the double-precision path";
  }
}

// The same on a real GPU (skips without one): its reductions sum in another order, so the
// figures agree with the CPU's to rounding, the allocation exactly, and a store restored from
// a GPU store's state continues bit-identically.
TEST(GactDevice, OnARealGpuTheEstimatesMatchTheCpuAndResumeExactly) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device d = testing::first_gpu()->device();
  ToyNet net;
  GactOptions o = toy_options(GactEstimator::Measured);
  GactPolicy cpu_policy(o), gpu_policy(o);
  cpu_policy.begin_step(0);
  gpu_policy.begin_step(0);
  ASSERT_TRUE(cpu_policy.gact().refresh(0, [&] { return net.grads(cpu_policy); }));
  ASSERT_TRUE(gpu_policy.gact().refresh(0, [&] { return on(d, net.grads(gpu_policy)); }));
  for (size_t l = 0; l < 2; ++l) {
    const double a = cpu_policy.gact().tensors()[l].sensitivity, b = gpu_policy.gact().tensors()[l].sensitivity;
    EXPECT_NEAR(b, a, 1e-9 * a) << "tensor " << l;
    EXPECT_EQ(gpu_policy.gact().tensors()[l].bits, cpu_policy.gact().tensors()[l].bits) << "tensor " << l;
  }
  Fp32Policy fp32;
  for (int k = 0; k < 3; ++k) {
    net.xa = testing::random_tensor({16, 64}, 300 + static_cast<uint64_t>(k));
    const std::vector<Tensor> g = net.grads(fp32);
    cpu_policy.gact().observe_gradients(g);
    gpu_policy.gact().observe_gradients(on(d, g));
  }
  const double a = cpu_policy.gact().sampling_variance(), b = gpu_policy.gact().sampling_variance();
  EXPECT_NEAR(b, a, 1e-5 * a);
  GactPolicy resumed(o);
  resumed.gact().import_state(gpu_policy.gact().export_state(), "test");
  for (int k = 3; k < 5; ++k) {
    net.xa = testing::random_tensor({16, 64}, 300 + static_cast<uint64_t>(k));
    const std::vector<Tensor> g = on(d, net.grads(fp32));
    gpu_policy.gact().observe_gradients(g);
    resumed.gact().observe_gradients(g);
  }
  EXPECT_TRUE(testing::same_state(resumed.gact().export_state(), gpu_policy.gact().export_state()));
  const Tensor grad = testing::random_tensor({4, 8, 5, 3}, 7, -2.0f, 2.0f);
  const std::vector<double> host = per_sample_sq_norms(grad), device = sample_sq_norms(grad.to(d));
  for (size_t n = 0; n < host.size(); ++n) EXPECT_NEAR(device[n], host[n], 1e-6 * host[n]) << "sample " << n;
}

}  // namespace
}  // namespace packrat
