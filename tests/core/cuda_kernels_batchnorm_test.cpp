// The CUDA batchnorm kernels' per-channel and per-element bodies (core/cuda/kernels/batchnorm.h,
// kernels/channel_sums.h), run on the host and compared with the CPU backend: the statistics
// from per-split partial sums (the split a GPU block would take), the normalizing affine, the
// backward with batch and global statistics, the running update and the batch counter. The
// block reduction itself (channel_sums.cuh) needs a GPU: here a host loop takes its place.
#include <algorithm>

#include "core/cuda/kernels/batchnorm.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::run_channel_finalize_on_host;
using testing::run_on_host;
using testing::run_quads_on_host;

// What channel_partial_sums_kernel computes: for block (c, s), the Term summed over elements
// [s * chunk, min(count, (s + 1) * chunk)) of channel c, into partial[(c * splits + s) * 2 + {0, 1}].
template <class Term>
std::vector<double> host_partials(const Term& term, int64_t N, int64_t C, int64_t HW, int splits) {
  std::vector<double> partial(static_cast<size_t>(C * splits * 2));
  const int64_t count = N * HW, chunk = (count + splits - 1) / splits;
  for (int64_t c = 0; c < C; ++c)
    for (int s = 0; s < splits; ++s) {
      double a = 0, b = 0;
      for (int64_t j = s * chunk; j < std::min(count, (s + 1) * chunk); ++j)
        term(c, cuda::channel_element(c, j, C, HW), a, b);
      partial[static_cast<size_t>((c * splits + s) * 2)] = a;
      partial[static_cast<size_t>((c * splits + s) * 2 + 1)] = b;
    }
  return partial;
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

TEST(CudaKernelsBatchnorm, ChannelElementWalksEachChannelOfAnNchwBuffer) {
  const int64_t N = 3, C = 4, HW = 5;
  std::vector<int> seen(static_cast<size_t>(N * C * HW), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < N * HW; ++j) {
      const int64_t at = cuda::channel_element(c, j, C, HW);
      EXPECT_EQ((at / HW) % C, c);
      EXPECT_EQ(cuda::channel_of(at, C, HW), c);
      ++seen[static_cast<size_t>(at)];
    }
  EXPECT_EQ(seen, std::vector<int>(seen.size(), 1));
  // The kernels' view of an NHWC tensor: N * H * W rows of C channels.
  const cuda::ChannelView nhwc = cuda::channel_view(2, 3, 5, true), plain = cuda::channel_view(2, 3, 5, false);
  EXPECT_EQ(std::vector<int64_t>({nhwc.N, nhwc.C, nhwc.HW}), std::vector<int64_t>({10, 3, 1}));
  EXPECT_EQ(std::vector<int64_t>({plain.N, plain.C, plain.HW}), std::vector<int64_t>({2, 3, 5}));
  // channels_of4 (a quad's channels) against channel_of, with channels innermost (HW 1) for few
  // channels too (C < 4 wraps within a quad).
  for (const int64_t c_count : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{64}})
    for (const int64_t hw : {int64_t{1}, int64_t{3}, int64_t{16}})
      for (int64_t i0 = 0; i0 < 3 * c_count * hw; i0 += 4) {
        int64_t c[4];
        cuda::channels_of4(i0, c_count, hw, c);
        for (int k = 0; k < 4; ++k) EXPECT_EQ(c[k], cuda::channel_of(i0 + k, c_count, hw)) << i0 << " " << k;
      }
  // channel_of's 32-bit and 64-bit paths, channels innermost (HW 1) and not.
  for (const int64_t i :
       {int64_t{0}, int64_t{12345}, (int64_t{1} << 32) - 1, int64_t{1} << 32, (int64_t{1} << 40) + 77})
    for (const int64_t hw : {int64_t{1}, int64_t{49}})
      EXPECT_EQ(cuda::channel_of(i, 40, hw), (i / hw) % 40) << i << " " << hw;
  EXPECT_EQ(cuda::channel_splits(1, 4), 1);
  EXPECT_EQ(cuda::channel_splits(8193, 4), 2);
  EXPECT_EQ(cuda::channel_splits(int64_t{1} << 40, 4), 64);
  // Channels innermost (NHWC as (N * H * W, C, 1)): more, shorter splits.
  EXPECT_EQ(cuda::channel_splits(1, 1), 1);
  EXPECT_EQ(cuda::channel_splits(257, 1), 2);
  EXPECT_EQ(cuda::channel_splits(int64_t{1} << 40, 1), 512);
}

TEST(CudaKernelsBatchnorm, TrainingAndInferenceForwardMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  const int64_t N = 3, C = 5, H = 7, W = 3, HW = H * W;
  const float eps = 1e-5f;
  // An offset far from zero: the shifted moments must not cancel.
  const Tensor x = host_random({N, C, H, W}, 1, 90.0f, 94.0f);
  const Tensor weight = host_random({C}, 2, 0.5f, 1.5f), bias = host_random({C}, 3);
  for (const bool affine : {true, false})
    for (const int splits : {1, 3, 64, 100}) {  // 64, 100 > elements per chunk: empty splits too
      SCOPED_TRACE(fmt::format("affine={} splits={}", affine, splits));
      const Tensor w = affine ? weight : Tensor(), b = affine ? bias : Tensor();
      Tensor want_y, want_mean, want_var;
      cpu.batchnorm_forward_training(x, w, b, eps, want_y, want_mean, want_var);

      std::vector<float> mean(C), var(C), scale(C), shift(C), y(static_cast<size_t>(x.numel()));
      const std::vector<double> partial =
          host_partials(cuda::CenteredMomentsTerm{x.data<float>(), HW}, N, C, HW, splits);
      run_channel_finalize_on_host(
          cuda::ChannelPartials{partial.data(), splits}, C,
          cuda::BatchStatsFinalize{x.data<float>(), HW, ptr_or_null(w), ptr_or_null(b), double(N * HW), eps,
                                   mean.data(), var.data(), scale.data(), shift.data()});
      run_quads_on_host(x.numel(),
                        cuda::ChannelAffine{x.data<float>(), y.data(), scale.data(), shift.data(), C, HW, x.numel()});
      expect_close(mean, want_mean.to_vector(), 1e-7f, 0.0f, "mean");
      expect_close(var, want_var.to_vector(), 1e-5f, 1e-7f, "var");
      expect_close(y, want_y.to_vector(), 1e-5f, 1e-5f, "y");

      // Inference with given statistics.
      const Tensor given_mean = host_random({C}, 4), given_var = host_random({C}, 5, 0.5f, 2.0f);
      const Tensor want_inference = cpu.batchnorm_forward_inference(x, w, b, given_mean, given_var, eps);
      run_on_host(C, cuda::GivenStatsAffine{given_mean.data<float>(), given_var.data<float>(), ptr_or_null(w),
                                            ptr_or_null(b), eps, scale.data(), shift.data()});
      run_quads_on_host(x.numel(),
                        cuda::ChannelAffine{x.data<float>(), y.data(), scale.data(), shift.data(), C, HW, x.numel()});
      expect_close(y, want_inference.to_vector(), 1e-6f, 1e-5f, "inference y");
    }
}

TEST(CudaKernelsBatchnorm, BackwardWithBatchAndGlobalStatisticsMatchesTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  const int64_t N = 2, C = 3, H = 5, W = 7, HW = H * W;
  const float eps = 1e-5f;
  const Tensor x = host_random({N, C, H, W}, 11, -1.0f, 3.0f), gy = host_random({N, C, H, W}, 12);
  const Tensor weight = host_random({C}, 13, 0.5f, 1.5f);
  Tensor y, batch_mean, batch_var;
  cpu.batchnorm_forward_training(x, weight, Tensor(), eps, y, batch_mean, batch_var);
  for (const bool affine : {true, false})
    for (const bool global_stats : {false, true})
      for (const int splits : {1, 4}) {
        SCOPED_TRACE(fmt::format("affine={} global_stats={} splits={}", affine, global_stats, splits));
        const Tensor w = affine ? weight : Tensor();
        const Tensor mean = global_stats ? host_random({C}, 14) : batch_mean;
        const Tensor var = global_stats ? host_random({C}, 15, 0.5f, 2.0f) : batch_var;
        Tensor want_dx, want_dw, want_db;
        cpu.batchnorm_backward(x, gy, w, affine, mean, var, eps, global_stats, want_dx, want_dw, want_db);

        std::vector<float> dweight(C), dbias(C), k(C), a(C), b(C), dx(static_cast<size_t>(x.numel()));
        const std::vector<double> partial = host_partials(
            cuda::GradMomentsTerm{x.data<float>(), gy.data<float>(), mean.data<float>()}, N, C, HW, splits);
        run_channel_finalize_on_host(
            cuda::ChannelPartials{partial.data(), splits}, C,
            cuda::BatchGradFinalize{var.data<float>(), ptr_or_null(w), double(N * HW), eps, global_stats,
                                    affine ? dweight.data() : nullptr, affine ? dbias.data() : nullptr, k.data(),
                                    a.data(), b.data()});
        run_quads_on_host(
            x.numel(), cuda::BatchNormBackwardElement{x.data<float>(), gy.data<float>(), dx.data(), mean.data<float>(),
                                                      k.data(), a.data(), b.data(), C, HW, x.numel()});
        expect_close(dx, want_dx.to_vector(), 1e-5f, 1e-6f, "dx");
        if (affine) {
          expect_close(dweight, want_dw.to_vector(), 1e-5f, 1e-6f, "dweight");
          expect_close(dbias, want_db.to_vector(), 1e-5f, 1e-6f, "dbias");
        }
      }
}

TEST(CudaKernelsBatchnorm, RunningUpdateAndBatchCounterMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  const int64_t C = 19;
  const Tensor start_mean = host_random({C}, 1), batch_mean = host_random({C}, 2);
  const Tensor start_var = host_random({C}, 3, 0.5f, 2.0f), batch_var = host_random({C}, 4, 0.5f, 2.0f);
  Tensor want_mean = start_mean.clone(), want_var = start_var.clone();
  Tensor want_count = Tensor::zeros(Shape{}, DType::i64), got_count = Tensor::zeros(Shape{}, DType::i64);
  cpu.batchnorm_update_running(want_mean, want_var, &want_count, batch_mean, batch_var, 0.1f, 30.0 / 29.0);
  Tensor got_mean = start_mean.clone(), got_var = start_var.clone();
  run_on_host(C, cuda::RunningUpdate{got_mean.data<float>(), got_var.data<float>(), got_count.data<int64_t>(),
                                     batch_mean.data<float>(), batch_var.data<float>(), 0.1f, 30.0 / 29.0});
  EXPECT_EQ(got_mean.to_vector(), want_mean.to_vector());  // the same double arithmetic, bit for bit
  EXPECT_EQ(got_var.to_vector(), want_var.to_vector());
  EXPECT_EQ(got_count.data<int64_t>()[0], 1) << "counted once, by channel 0's thread";
  EXPECT_EQ(want_count.data<int64_t>()[0], 1);
}

}  // namespace
}  // namespace packrat
