// The CUDA elementwise section's bodies and per-thread helpers (core/cuda/kernels/elementwise.h,
// the geometries of core/cuda/elementwise_geometry.h and the plan of elementwise_kernels.h) run on
// the host against the CPU backend: binary ops same-shape and broadcast in f32 and f64 (bit for
// bit), scale, accumulate, and the reductions, where the host replays each kernel's blocks
// thread by thread (a GPU adds a block's threads in a tree instead: the same terms, in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/broadcast.h"
#include "core/cuda/elementwise_geometry.h"
#include "core/cuda/elementwise_kernels.h"
#include "core/cuda/kernels/elementwise.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::run_on_host;
using testing::run_quads_on_host;

constexpr int kBlockThreads = 256;  // launch.cuh's kThreadsPerBlock, the reductions' block size

Tensor random_of(const Shape& s, uint64_t seed, DType dtype) {
  const Tensor t = host_random(s, seed, 0.5f, 2.0f);
  return dtype == DType::f32 ? t : t.to(dtype);
}

template <typename Fn>
void with_body_op(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add: fn(cuda::AddOp{}); break;
    case BinaryOp::Sub: fn(cuda::SubOp{}); break;
    case BinaryOp::Mul: fn(cuda::MulOp{}); break;
    case BinaryOp::Div: fn(cuda::DivOp{}); break;
  }
}

template <typename T>
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const T* g = got.data<T>();
  const T* w = want.data<T>();
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(&g[i], &w[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", the CPU backend's " << w[i];
      return;
    }
}

TEST(CudaKernelsElementwise, BinaryBodiesMatchTheCpuBackendWithAndWithoutBroadcasting) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const std::vector<std::pair<Shape, Shape>> shapes{
      {{2, 32, 3, 5}, {2, 32, 3, 5}}, {{2, 32, 1, 1}, {2, 32, 3, 5}}, {{2, 32, 3, 5}, {2, 32, 1, 1}},
      {{3, 5}, {2, 4, 3, 5}},         {{3, 1}, {1, 4}},               {{1}, {2, 3}},
      {{2, 1, 5}, {2, 3, 1}},         {{7, 1, 3, 1, 5}, {1, 4, 1, 6, 1}}, {{1, 1}, {1}},
      {{5, 7}, {7}},                  {{1, 7, 1, 9}, {3, 7, 11, 9}}};
  int seed = 0;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = random_of(sa, ++seed, dtype), b = random_of(sb, ++seed, dtype);
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
        const std::string what = sa.str() + " op " + std::to_string(static_cast<int>(op)) + " " + sb.str() + " " +
                                 std::string(dtype_name(dtype));
        const Tensor want = cpu.binary(op, a, b);
        Tensor got = Tensor::empty(want.shape(), dtype);
        const auto run = [&](auto t) {
          using T = decltype(t);
          with_body_op(op, [&](auto f) {
            using Op = decltype(f);
            if (sa == sb) {
              run_quads_on_host(got.numel(), cuda::BinarySameShapeBody<T, Op>{a.data<T>(), b.data<T>(), got.data<T>(), got.numel()});
            } else {
              const std::vector<int64_t> out = broadcast_shape("test", sa, sb);
              cuda::BroadcastGeometry g = cuda::broadcast_geometry(out, sa, sb, "test");
              EXPECT_TRUE(g.narrow) << what;
              run_on_host(got.numel(), cuda::BinaryBroadcastBody<T, Op>{a.data<T>(), b.data<T>(), got.data<T>(), g});
              expect_same<T>(got, want, what + " (32-bit indices)");
              g.narrow = false;  // the 64-bit path of tensors with 2^32 elements or more
              run_on_host(got.numel(), cuda::BinaryBroadcastBody<T, Op>{a.data<T>(), b.data<T>(), got.data<T>(), g});
            }
          });
          expect_same<T>(got, want, what);
        };
        if (dtype == DType::f32) {
          run(float{});
        } else {
          run(double{});
        }
      }
    }
  }
  // Contiguous dims merge: (N, C, 1, 1) x (N, C, H, W) runs as two dims.
  const cuda::BroadcastGeometry g = cuda::broadcast_geometry({2, 32, 3, 5}, Shape{2, 32, 1, 1}, Shape{2, 32, 3, 5}, "t");
  EXPECT_EQ(g.rank, 2);
  EXPECT_EQ(g.size[0], 64);
  EXPECT_EQ(g.size[1], 15);
  EXPECT_EQ(g.stride_a[1], 0);
}

TEST(CudaKernelsElementwise, ScaleAndAccumulateBodiesMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  const Tensor x = host_random({1001}, 60), y = host_random({1001}, 61);
  Tensor got = Tensor::empty({1001});
  run_on_host(1001, cuda::ScaleBody<float>{x.data<float>(), got.data<float>(), static_cast<float>(0.3)});
  expect_same<float>(got, cpu.scale(x, 0.3), "scale f32");
  const Tensor xd = x.to(DType::f64);
  Tensor gotd = Tensor::empty({1001}, DType::f64);
  run_on_host(1001, cuda::ScaleBody<double>{xd.data<double>(), gotd.data<double>(), 0.3});
  expect_same<double>(gotd, cpu.scale(xd, 0.3), "scale f64");

  Tensor want = x.clone(), acc = x.clone();
  cpu.accumulate(want, y);
  run_on_host(1001, cuda::AccumulateBody<float>{acc.data<float>(), y.data<float>()});
  expect_same<float>(acc, want, "accumulate");
}

// reduce_sum / reduce_sum_squares as the GPU runs them: reduce_sum_blocks(n) blocks of 256
// threads, each thread's strided_sum, then the partials.
template <bool Square>
double replay_reduce_sum(const float* x, int64_t n) {
  const int64_t blocks = cuda::reduce_sum_blocks(n), step = blocks * kBlockThreads;
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    double block = 0.0;
    for (int64_t t = 0; t < kBlockThreads; ++t) block += cuda::strided_sum<Square>(x, n, b * kBlockThreads + t, step);
    total += block;
  }
  return total;
}

TEST(CudaKernelsElementwise, ReduceSumSharesAddUpToTheCpuBackendsSums) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300001}}) {  // one block, some, the 1024 cap with wrap
    const Tensor x = host_random({n}, 70, -1.0f, 3.0f);
    const double s = cpu.reduce_sum(x), sq = cpu.reduce_sum_squares(x);
    EXPECT_NEAR(replay_reduce_sum<false>(x.data<float>(), n), s, 1e-12 * n) << n;
    EXPECT_NEAR(replay_reduce_sum<true>(x.data<float>(), n), sq, 1e-12 * sq) << n;
  }
  EXPECT_EQ(cuda::reduce_sum_blocks(300001), cuda::kReduceMaxBlocks);
}

// reduce_sum_to as the GPU runs it for its plan: per (output, split) task a block of 256 threads
// (rows) or one thread (columns), then the partials summed per output.
template <typename T>
Tensor replay_sum_to(const Tensor& x, const Shape& shape, bool narrow, cuda::SumToPlan* plan_out) {
  cuda::SumToGeometry g = cuda::sum_to_geometry(x.shape(), shape);
  EXPECT_TRUE(g.narrow);
  g.narrow = narrow;  // false: the 64-bit path of tensors with 2^32 elements or more
  const cuda::SumToPlan plan = cuda::plan_sum_to(g);
  *plan_out = plan;
  Tensor out = Tensor::empty(shape, x.dtype());
  const T* xs = x.data<T>();
  T* o = out.data<T>();
  const int64_t tasks = g.outputs * plan.splits;
  std::vector<double> partial(static_cast<size_t>(tasks));  // (splits, M)
  if (plan.rows) {
    for (int64_t i = 0; i < tasks; ++i) {
      const int64_t out_index = i % g.outputs, s = i / g.outputs;
      const int64_t begin = g.split_begin(s, plan.splits), end = g.split_begin(s + 1, plan.splits);
      double v = 0.0;
      for (int64_t t = 0; t < kBlockThreads; ++t) v += cuda::sum_to_share(xs, g, out_index, begin + t, end, kBlockThreads);
      if (plan.splits > 1) {
        partial[static_cast<size_t>(i)] = v;
      } else {
        o[i] = static_cast<T>(v);
      }
    }
  } else if (plan.splits > 1) {
    run_on_host(tasks, cuda::SumToColumnsBody<T, double>{xs, partial.data(), g, plan.splits});
  } else {
    run_on_host(tasks, cuda::SumToColumnsBody<T, T>{xs, o, g, plan.splits});
  }
  if (plan.splits > 1) run_on_host(g.outputs, cuda::SumPartialsBody<T>{partial.data(), o, g.outputs, plan.splits});
  return out;
}

TEST(CudaKernelsElementwise, ReduceSumToReplaysMatchTheCpuBackendInEveryPlan) {
  Backend& cpu = backend(Device::cpu());
  DeviceScope on_cpu(Device::cpu());
  struct Case {
    Shape x, to;
    bool rows;
    bool split;
  };
  const std::vector<Case> cases{
      {{2, 32, 3, 5}, {2, 32, 1, 1}, false, false},  // 15-element rows: a thread per output
      {{2, 32, 3, 5}, {3, 5}, false, true},          // columns, split
      {{2, 32, 3, 5}, {32, 1, 5}, false, false},     // kept dims apart, short sums: a thread per output
      {{2, 32, 3, 5}, {1}, true, false},             // everything
      {{2, 32, 3, 5}, {2, 32, 3, 5}, false, false},  // nothing
      {{4096, 3}, {3}, false, true},                 // bias-gradient shape, few columns: many splits
      {{300, 700}, {700}, false, true},              // bias-gradient shape
      {{2, 3, 100000}, {2, 3, 1}, true, true},       // long rows: blocks, split
      {{3, 5, 7, 9}, {1, 5, 1, 1}, true, false},     // conv bias: N and H W summed, C kept
      {{5, 1, 9}, {1, 9}, false, false}};            // a size-1 dim in x
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const std::string what = c.x.str() + " -> " + c.to.str() + " " + std::string(dtype_name(dtype));
      const Tensor x = random_of(c.x, 80, dtype);
      const Tensor want = cpu.reduce_sum_to(x, c.to);
      cuda::SumToPlan plan;
      for (bool narrow : {true, false}) {
        if (dtype == DType::f32) {
          const Tensor got = replay_sum_to<float>(x, c.to, narrow, &plan);
          testing::expect_close(got.to_vector(), want.to_vector(), 1e-6f, 1e-6f, what);
        } else {
          const Tensor got = replay_sum_to<double>(x, c.to, narrow, &plan);
          const double* g = got.data<double>();
          const double* w = want.data<double>();
          for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(g[i], w[i], 1e-12 * std::fabs(w[i]) + 1e-12) << what;
        }
      }
      EXPECT_EQ(plan.rows, c.rows) << what;
      EXPECT_EQ(plan.splits > 1, c.split) << what << ": " << plan.splits << " splits";
    }
  }
}

}  // namespace
}  // namespace packrat
