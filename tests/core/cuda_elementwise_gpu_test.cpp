// The CUDA backend's pointwise, elementwise, random and optimizer sections on a GPU against the
// CPU backend, before the whole CUDA backend is complete (the backend tests then cover them again
// against their double references). Compiled always; each test skips with a one-line reason when
// no GPU is visible. Bit-for-bit where the arithmetic is exact or shared word for word (binary ops,
// scale, accumulate, dropout masks and values, uniform fills); within f32 rounding where nvcc may
// contract a multiply-add differently from GCC (activations, optimizer steps, normal fills).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/pointwise_math.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

#define PACKRAT_REQUIRE_GPU()                   \
  Backend* gpu = testing::first_gpu();          \
  if (!gpu) GTEST_SKIP() << testing::no_gpu_reason(); \
  Backend& cpu = backend(Device::cpu())

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); }

TEST(CudaElementwiseGpu, ActivationsMatchTheCpuBackend) {
  PACKRAT_REQUIRE_GPU();
  const Tensor hx = host_random({2, 32, 3, 5}, 3, -25.0f, 25.0f), hg = host_random({2, 32, 3, 5}, 4);
  for (Layout layout : {Layout::Plain, Layout::nChw16c}) {
    const Tensor x = gpu->to_layout(hx.to(gpu->device()), layout), g = gpu->to_layout(hg.to(gpu->device()), layout);
    const Tensor cx = cpu.to_layout(hx, layout), cg = cpu.to_layout(hg, layout);
    for (int k = 0; k < kNumActivations; ++k) {
      const auto id = static_cast<ActivationId>(k);
      const std::string what = std::string(activation_name(id)) + " " + std::string(layout_name(layout));
      const Tensor y = gpu->pointwise_forward(id, x);
      EXPECT_EQ(y.layout(), layout) << what;
      expect_close(host_values(y), host_values(cpu.pointwise_forward(id, cx)), 1e-5f, 1e-7f, what + " f");
      expect_close(host_values(gpu->pointwise_derivative(id, x, false)),
                   host_values(cpu.pointwise_derivative(id, cx, false)), 1e-5f, 1e-7f, what + " f'");
      expect_close(host_values(gpu->pointwise_backward(id, x, g, false)),
                   host_values(cpu.pointwise_backward(id, cx, cg, false)), 1e-5f, 1e-7f, what + " grad f'");
      if (derivative_from_output_exists(id)) {
        const Tensor cy = cpu.pointwise_forward(id, cx);
        expect_close(host_values(gpu->pointwise_backward(id, y, g, true)),
                     host_values(cpu.pointwise_backward(id, cy, cg, true)), 1e-5f, 1e-7f, what + " grad f' from y");
      } else {
        EXPECT_THROW(gpu->pointwise_derivative(id, y, true), Error) << what;
      }
    }
  }
}

TEST(CudaElementwiseGpu, BinaryScaleAccumulateAreTheCpuBackendsBitForBit) {
  PACKRAT_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> shapes{{{2, 32, 3, 5}, {2, 32, 3, 5}}, {{2, 32, 1, 1}, {2, 32, 3, 5}},
                                                    {{3, 5}, {2, 4, 3, 5}},         {{2, 1, 5}, {2, 3, 1}},
                                                    {{1}, {2, 3}},                  {{300, 700}, {700}}};
  int seed = 0;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor ha = host_random(sa, ++seed).to(dtype), hb = host_random(sb, ++seed, 0.5f, 2.0f).to(dtype);
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
        const std::string what = sa.str() + " op " + std::to_string(static_cast<int>(op)) + " " + sb.str();
        const Tensor y = gpu->binary(op, ha.to(gpu->device()), hb.to(gpu->device()));
        const Tensor want = cpu.binary(op, ha, hb);
        EXPECT_EQ(y.shape(), want.shape()) << what;
        EXPECT_EQ(y.dtype(), dtype) << what;
        EXPECT_EQ(values(y), values(want)) << what;
      }
    }
  }
  const Tensor hx = host_random({2, 32, 3, 5}, 50), hy = host_random({2, 32, 3, 5}, 51);
  const Tensor x = gpu->to_layout(hx.to(gpu->device()), Layout::nChw16c);
  const Tensor blocked = gpu->binary(BinaryOp::Mul, x, hy.to(gpu->device()));
  EXPECT_EQ(blocked.layout(), Layout::nChw16c);
  EXPECT_EQ(host_values(blocked), host_values(cpu.binary(BinaryOp::Mul, hx, hy)));
  EXPECT_EQ(host_values(gpu->scale(x, 0.3)), host_values(cpu.scale(hx, 0.3)));
  Tensor acc = hx.to(gpu->device());
  const int64_t version = acc.version();
  gpu->accumulate(acc, x);
  EXPECT_EQ(host_values(acc), host_values(cpu.scale(hx, 2.0)));
  EXPECT_GT(acc.version(), version);
}

TEST(CudaElementwiseGpu, ReductionsMatchTheCpuBackendAndFreeTheirWorkspace) {
  PACKRAT_REQUIRE_GPU();
  Allocator& memory = gpu->allocator();
  const int64_t workspace_before = memory.current(MemTag::Workspace);
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3000001}}) {
    const Tensor hx = host_random({n}, 70, -1.0f, 3.0f);
    const Tensor x = hx.to(gpu->device());
    const double s = cpu.reduce_sum(hx), sq = cpu.reduce_sum_squares(hx);
    EXPECT_NEAR(gpu->reduce_sum(x), s, 1e-12 * n) << n;
    EXPECT_NEAR(gpu->reduce_sum_squares(x), sq, 1e-12 * sq) << n;
  }
  for (const auto& [xs, to] : std::vector<std::pair<Shape, Shape>>{{{2, 32, 3, 5}, {2, 32, 1, 1}},
                                                                   {{2, 32, 3, 5}, {3, 5}},
                                                                   {{2, 32, 3, 5}, {32, 1, 5}},
                                                                   {{2, 32, 3, 5}, {1}},
                                                                   {{4096, 3}, {3}},
                                                                   {{512, 1000}, {1000}},
                                                                   {{2, 3, 100000}, {2, 3, 1}},
                                                                   {{64, 128, 8, 8}, {1, 128, 1, 1}}}) {
    const Tensor hx = host_random(xs, 80);
    const Tensor r = gpu->reduce_sum_to(hx.to(gpu->device()), to);
    EXPECT_EQ(r.shape(), to);
    expect_close(host_values(r), host_values(cpu.reduce_sum_to(hx, to)), 1e-6f, 1e-6f, xs.str() + " -> " + to.str());
    const Tensor hd = hx.to(DType::f64);
    const Tensor rd = gpu->reduce_sum_to(hd.to(gpu->device()), to);
    EXPECT_EQ(rd.dtype(), DType::f64);
    const std::vector<float> want = values(cpu.reduce_sum_to(hd, to));
    expect_close(values(rd), want, 1e-7f, 1e-9f, xs.str() + " -> " + to.str() + " f64");
  }
  EXPECT_EQ(memory.current(MemTag::Workspace), workspace_before);
}

TEST(CudaElementwiseGpu, DropoutMasksAndFillsAreTheCpuBackendsBitForBit) {
  PACKRAT_REQUIRE_GPU();
  const Tensor hx = host_random({1000, 7}, 9);
  Tensor cmask, gmask;
  const Tensor cy = cpu.dropout_forward(hx, 0.3f, 1.0f / 0.7f, 1234, 5, &cmask);
  const Tensor gy = gpu->dropout_forward(hx.to(gpu->device()), 0.3f, 1.0f / 0.7f, 1234, 5, &gmask);
  EXPECT_EQ(gmask.dtype(), DType::u8);
  EXPECT_EQ(values(gmask), values(cmask));
  EXPECT_EQ(host_values(gy), host_values(cy));
  const Tensor hg = host_random({1000, 7}, 11);
  EXPECT_EQ(host_values(gpu->mask_scale(hg.to(gpu->device()), gmask, 1.5f)), host_values(cpu.mask_scale(hg, cmask, 1.5f)));

  DeviceScope on(gpu->device());
  Tensor gu = Tensor::empty({4001}), gn = Tensor::empty({4001});
  Tensor cu, cn;
  {
    DeviceScope on_cpu(Device::cpu());
    cu = Tensor::empty({4001});
    cn = Tensor::empty({4001});
  }
  EXPECT_EQ(gpu->fill_uniform(gu, -1.0f, 3.0f, 42, 7, 100), cpu.fill_uniform(cu, -1.0f, 3.0f, 42, 7, 100));
  EXPECT_EQ(gpu->fill_normal(gn, 1.0f, 2.0f, 42, 8, 5), cpu.fill_normal(cn, 1.0f, 2.0f, 42, 8, 5));
  EXPECT_EQ(host_values(gu), host_values(cu));
  expect_close(host_values(gn), host_values(cn), 1e-5f, 1e-5f, "normal fill");
}

TEST(CudaElementwiseGpu, OptimizerStepsMatchTheCpuBackend) {
  PACKRAT_REQUIRE_GPU();
  const Tensor hp = host_random({2, 32, 3, 5}, 1), hg = host_random({2, 32, 3, 5}, 2), hb = host_random({2, 32, 3, 5}, 3);
  for (const Backend::SgdStep& s : {Backend::SgdStep{0.1f, 0.01f, 0.0f, 0.0f, false, false},
                                    Backend::SgdStep{0.1f, 0.01f, 0.9f, 0.0f, false, true},
                                    Backend::SgdStep{0.1f, 0.0f, 0.9f, 0.1f, false, false},
                                    Backend::SgdStep{0.1f, 0.001f, 0.9f, 0.0f, true, false}}) {
    Tensor cp = hp.clone(), cb = s.momentum == 0 ? Tensor() : hb.clone();
    Tensor gp = hp.to(gpu->device()), gb = s.momentum == 0 ? Tensor() : hb.to(gpu->device());
    cpu.sgd_update(cp, hg, cb, s);
    gpu->sgd_update(gp, hg.to(gpu->device()), gb, s);
    const std::string what = "sgd momentum " + std::to_string(s.momentum) + (s.nesterov ? " nesterov" : "");
    expect_close(host_values(gp), host_values(cp), 1e-6f, 1e-7f, what);
    if (cb.defined()) expect_close(host_values(gb), host_values(cb), 1e-6f, 1e-7f, what + " buffer");
  }
  Tensor cp = hp.clone(), cm = Tensor::zeros_like(hp), cv = Tensor::zeros_like(hp);
  Tensor gp = hp.to(gpu->device()), gm = cm.to(gpu->device()), gv = cv.to(gpu->device());
  for (int t = 1; t <= 2; ++t) {
    const Backend::AdamWStep s{1.0f - 5e-4f, 0.9f, 0.999f, static_cast<float>(1e-2 / (1 - std::pow(0.9, t))),
                               static_cast<float>(std::sqrt(1 - std::pow(0.999, t))), 1e-8f};
    cpu.adamw_update(cp, hg, cm, cv, s);
    gpu->adamw_update(gp, hg.to(gpu->device()), gm, gv, s);
    expect_close(host_values(gp), host_values(cp), 1e-6f, 1e-7f, "adamw p, step " + std::to_string(t));
    expect_close(host_values(gm), host_values(cm), 1e-6f, 1e-9f, "adamw m");
    expect_close(host_values(gv), host_values(cv), 1e-6f, 1e-12f, "adamw v");
  }
}

}  // namespace
}  // namespace packrat
