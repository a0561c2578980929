// The CUDA row kernels' bodies (core/cuda/kernels/rows.h), run on the host with no GPU: row
// bodies as `lanes` cooperating threads (tests/support/host_rows.h: the lane partition and the
// combination of partial sums the GPU does), per-index bodies through run_on_host, against the
// CPU backend. Lane counts: 1, 3 (rows longer and shorter than the lanes) and 32 (a warp).
// What only a GPU checks: the warp shuffles and block_sum / block_max themselves, the launch
// geometry (rows_kernels.cu, row_launch.cuh) and the device-side atomicMin of the bad-target flag.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/rows.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"
#include "tests/support/host_rows.h"

namespace packrat {
namespace {

using cuda::CrossEntropyBackward;
using cuda::CrossEntropyForwardRow;
using cuda::kNoBadIndex;
using cuda::LayerNormBackwardRow;
using cuda::LayerNormForwardRow;
using cuda::LayerNormParamPartials;
using cuda::SoftmaxBackwardRow;
using cuda::SoftmaxForwardRow;
using cuda::SumChunksToFloat;
using cuda::TargetMeanToFloatRow;
using testing::expect_close;
using testing::host_random;
using testing::run_on_host;
using testing::run_rows_on_host;

Backend& cpu() { return backend(Device::cpu()); }

constexpr int kLaneCounts[] = {1, 3, 32};

Tensor host_ids(const std::vector<int64_t>& v) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

TEST(CudaKernelsRows, SoftmaxBodiesMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 5, 33}, Shape{4, 1}, Shape{2, 100}}) {
    const int64_t D = shape[-1], R = shape.numel() / D;
    const Tensor x = host_random(shape, 1, -8.0f, 8.0f), g = host_random(shape, 2);
    const Tensor want_y = cpu().softmax_forward(x, 1.0f, DType::f32), want_dx = cpu().softmax_backward(want_y, g, 1.0f, DType::f32);
    for (int lanes : kLaneCounts) {
      const std::string what = shape.str() + " lanes " + std::to_string(lanes);
      Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape);
      run_rows_on_host(R, lanes, SoftmaxForwardRow{x.data<float>(), y.data<float>(), D});
      expect_close(values(y), values(want_y), 1e-5f, 1e-7f, "softmax " + what);
      run_rows_on_host(R, lanes, SoftmaxBackwardRow{want_y.data<float>(), g.data<float>(), dx.data<float>(), D});
      expect_close(values(dx), values(want_dx), 1e-5f, 1e-7f, "softmax backward " + what);
    }
  }
}

TEST(CudaKernelsRows, CrossEntropyBodiesMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  // Without an ignore_index; with -100 on some targets (PyTorch's value); with every target ignored.
  enum class Ignore { None, Some, All };
  for (const auto& [N, C] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {3, 70}, {40, 2}}) {
    const Tensor logits = host_random({N, C}, 3, -6.0f, 6.0f);
    for (Ignore ig : {Ignore::None, Ignore::Some, Ignore::All}) {
      std::vector<int64_t> tv;
      for (int64_t n = 0; n < N; ++n)
        tv.push_back(ig == Ignore::All || (ig == Ignore::Some && n % 2 == 1) ? -100 : (n * 5 + 3) % C);
      const Tensor targets = host_ids(tv);
      const int64_t ignore = ig == Ignore::None ? kNoIgnoreIndex : -100;
      for (float eps : {0.0f, 0.1f, 1.0f}) {
        const auto want = cpu().cross_entropy_forward(logits, targets, eps, true, ignore);
        EXPECT_EQ(want.count, ig == Ignore::None ? N : ig == Ignore::Some ? N - N / 2 : 0);  // the even samples kept
        for (int lanes : kLaneCounts) {
          const std::string what = std::to_string(N) + "x" + std::to_string(C) + " eps " + std::to_string(eps) +
                                   " lanes " + std::to_string(lanes) + " ignoring " + std::to_string(int(ig));
          Tensor probs = Tensor::empty({N, C}), row_loss = Tensor::empty({N}, DType::f64), loss = Tensor::empty(Shape());
          unsigned long long bad = kNoBadIndex;
          double count = -1;
          run_rows_on_host(N, lanes,
                           CrossEntropyForwardRow{logits.data<float>(), targets.data<int64_t>(), row_loss.data<double>(),
                                                  probs.data<float>(), &bad, C, eps, ignore});
          run_rows_on_host(1, lanes,
                           TargetMeanToFloatRow{row_loss.data<double>(), targets.data<int64_t>(), loss.data<float>(),
                                                &count, N, ignore});
          EXPECT_EQ(bad, kNoBadIndex) << what;
          EXPECT_EQ(count, static_cast<double>(want.count)) << what;
          EXPECT_NEAR(loss.item(), want.loss.item(), 1e-6 * std::abs(want.loss.item())) << what;
          expect_close(values(probs), values(want.probs), 1e-6f, 1e-8f, "probs " + what);
          // Without probs the body writes none (a null pointer) and the loss is the same.
          run_rows_on_host(N, lanes,
                           CrossEntropyForwardRow{logits.data<float>(), targets.data<int64_t>(), row_loss.data<double>(),
                                                  nullptr, &bad, C, eps, ignore});
          run_rows_on_host(1, lanes,
                           TargetMeanToFloatRow{row_loss.data<double>(), targets.data<int64_t>(), loss.data<float>(),
                                                nullptr, N, ignore});
          EXPECT_NEAR(loss.item(), want.loss.item(), 1e-6 * std::abs(want.loss.item())) << what;
        }
        // Backward, with the loss gradient in f32 and in f64.
        for (DType gdt : {DType::f32, DType::f64}) {
          const Tensor g32 = Tensor::full(Shape(), 0.7f), grad_loss = g32.to(gdt);
          const Tensor want_dx = cpu().cross_entropy_backward(want.probs, targets, eps, grad_loss, ignore, want.count);
          const float off = eps / static_cast<float>(C), on = 1.0f - eps + off;
          Tensor dx = Tensor::empty({N, C});
          if (gdt == DType::f64)
            run_on_host(N * C, CrossEntropyBackward<double>{want.probs.data<float>(), targets.data<int64_t>(),
                                                            grad_loss.data<double>(), dx.data<float>(), want.count, C,
                                                            off, on, ignore});
          else
            run_on_host(N * C, CrossEntropyBackward<float>{want.probs.data<float>(), targets.data<int64_t>(),
                                                           grad_loss.data<float>(), dx.data<float>(), want.count, C,
                                                           off, on, ignore});
          EXPECT_EQ(values(dx), values(want_dx)) << "cross_entropy backward eps " << eps << " " << dtype_name(gdt);
        }
      }
    }
  }
}

TEST(CudaKernelsRows, CrossEntropyRecordsTheFirstBadTarget) {
  DeviceScope on_cpu(Device::cpu());
  const int64_t N = 6, C = 4;
  const Tensor logits = host_random({N, C}, 4);
  const Tensor targets = host_ids({0, 3, 2, 4, 1, -1});  // samples 3 and 5 are out of range
  for (int lanes : kLaneCounts) {
    Tensor row_loss = Tensor::empty({N}, DType::f64);
    unsigned long long bad = kNoBadIndex;
    run_rows_on_host(N, lanes,
                     CrossEntropyForwardRow{logits.data<float>(), targets.data<int64_t>(), row_loss.data<double>(),
                                            nullptr, &bad, C, 0.0, kNoIgnoreIndex});
    EXPECT_EQ(bad, 3u) << lanes;
    EXPECT_EQ(row_loss.data<double>()[3], 0.0);
    EXPECT_GT(row_loss.data<double>()[2], 0.0);  // the good rows still get their loss
    // An ignore_index of -1 makes sample 5 ignored, not bad; sample 3 stays the first bad one.
    bad = kNoBadIndex;
    run_rows_on_host(N, lanes,
                     CrossEntropyForwardRow{logits.data<float>(), targets.data<int64_t>(), row_loss.data<double>(),
                                            nullptr, &bad, C, 0.0, -1});
    EXPECT_EQ(bad, 3u) << lanes;
    EXPECT_EQ(row_loss.data<double>()[5], 0.0);
  }
  // Only the ignored one out of range: nothing is bad.
  const Tensor ignored_only = host_ids({0, 3, 2, 1, 1, -1});
  Tensor row_loss = Tensor::empty({N}, DType::f64);
  unsigned long long bad = kNoBadIndex;
  run_rows_on_host(N, 3,
                   CrossEntropyForwardRow{logits.data<float>(), ignored_only.data<int64_t>(), row_loss.data<double>(),
                                          nullptr, &bad, C, 0.0, -1});
  EXPECT_EQ(bad, kNoBadIndex);
}

TEST(CudaKernelsRows, LayerNormBodiesMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  // (100, 10): several row chunks for the parameter gradients; (2, 3, 37): a row longer than 32 lanes.
  for (const Shape& shape : {Shape{6, 10}, Shape{2, 3, 37}, Shape{100, 10}, Shape{5, 1}}) {
    const int64_t D = shape[-1], R = shape.numel() / D;
    const Tensor x = host_random(shape, 5, -3.0f, 5.0f), g = host_random(shape, 6);
    const Tensor w = host_random({D}, 7, 0.5f, 1.5f), b = host_random({D}, 8);
    for (bool affine : {true, false}) {
      const Tensor wt = affine ? w : Tensor(), bt = affine ? b : Tensor();
      const float* wp = affine ? w.data<float>() : nullptr;
      const auto want = cpu().layernorm_forward(x, wt, bt, 1e-5f);
      const auto want_g = cpu().layernorm_backward(x, want.mean, want.rstd, wt, g, true, true);
      for (int lanes : kLaneCounts) {
        const std::string what =
            shape.str() + (affine ? " affine" : " plain") + " lanes " + std::to_string(lanes);
        Tensor y = Tensor::empty(shape), mean = Tensor::empty({R}), rstd = Tensor::empty({R}), dx = Tensor::empty(shape);
        run_rows_on_host(R, lanes,
                         LayerNormForwardRow{x.data<float>(), wp, affine ? b.data<float>() : nullptr, y.data<float>(),
                                             mean.data<float>(), rstd.data<float>(), D, 1e-5f});
        expect_close(values(y), values(want.y), 1e-5f, 1e-6f, "layernorm y " + what);
        expect_close(values(mean), values(want.mean), 1e-6f, 1e-7f, "layernorm mean " + what);
        expect_close(values(rstd), values(want.rstd), 1e-6f, 0.0f, "layernorm rstd " + what);
        run_rows_on_host(R, lanes,
                         LayerNormBackwardRow{x.data<float>(), want.mean.data<float>(), want.rstd.data<float>(), wp,
                                              g.data<float>(), dx.data<float>(), D});
        expect_close(values(dx), values(want_g.dx), 1e-5f, 1e-6f, "layernorm dx " + what);
      }
    }
    // The parameter gradients: partial column sums per row chunk, then the chunks summed.
    const int64_t chunks = cuda::layernorm_param_chunks(R, D), per = (R + chunks - 1) / chunks;
    if (R >= 100) {
      EXPECT_GT(chunks, 1) << shape.str();
    }
    const auto stats = cpu().layernorm_forward(x, Tensor(), Tensor(), 1e-5f);
    const auto want_g = cpu().layernorm_backward(x, stats.mean, stats.rstd, w, g, true, true);
    std::vector<double> dw_part(static_cast<size_t>(chunks * D)), db_part(dw_part.size());
    run_on_host(chunks * D, LayerNormParamPartials{x.data<float>(), stats.mean.data<float>(), stats.rstd.data<float>(),
                                                   g.data<float>(), dw_part.data(), db_part.data(), R, D, per});
    Tensor dw = Tensor::empty({D}), db = Tensor::empty({D});
    run_on_host(D, SumChunksToFloat{dw_part.data(), dw.data<float>(), chunks, D});
    run_on_host(D, SumChunksToFloat{db_part.data(), db.data<float>(), chunks, D});
    expect_close(values(dw), values(want_g.dweight), 1e-6f, 1e-6f, "layernorm dweight " + shape.str());
    expect_close(values(db), values(want_g.dbias), 1e-6f, 1e-6f, "layernorm dbias " + shape.str());
  }
}

}  // namespace
}  // namespace packrat
