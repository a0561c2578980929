// The backend test, batchnorm section: training and inference forward, backward with batch or
// global statistics, the running-statistics update and the batch counter, on every backend
// against a two-pass reference in double, plain, blocked and NHWC.
#include <cmath>

#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

struct BnReference {
  std::vector<float> y, mean, var, dx, dw, db;
};

// x, gy (N, C, HW) plain. Training: statistics from x (two passes); otherwise the given ones.
BnReference reference(const std::vector<float>& x, const std::vector<float>& gy, const std::vector<float>& w,
                      const std::vector<float>& b, int64_t N, int64_t C, int64_t HW, float eps, bool training,
                      const std::vector<float>& given_mean, const std::vector<float>& given_var) {
  BnReference r;
  r.y.resize(x.size()), r.dx.resize(x.size());
  const double n = static_cast<double>(N * HW);
  auto at = [&](int64_t i, int64_t c, int64_t s) { return static_cast<size_t>((i * C + c) * HW + s); };
  for (int64_t c = 0; c < C; ++c) {
    const size_t ci = static_cast<size_t>(c);
    double mean = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < N; ++i)
        for (int64_t s = 0; s < HW; ++s) mean += x[at(i, c, s)];
      mean /= n;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t s = 0; s < HW; ++s) var += (x[at(i, c, s)] - mean) * (x[at(i, c, s)] - mean);
      var /= n;
    } else {
      mean = given_mean[ci], var = given_var[ci];
    }
    const double invstd = 1.0 / std::sqrt(var + eps), wc = w.empty() ? 1.0 : w[ci], bc = b.empty() ? 0.0 : b[ci];
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t s = 0; s < HW; ++s) {
        sdy += gy[at(i, c, s)];
        sdyx += gy[at(i, c, s)] * (x[at(i, c, s)] - mean);
      }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t s = 0; s < HW; ++s) {
        const double xc = x[at(i, c, s)] - mean;
        r.y[at(i, c, s)] = static_cast<float>(xc * invstd * wc + bc);
        const double g = training ? gy[at(i, c, s)] - sdy / n - xc * sdyx * invstd * invstd / n : gy[at(i, c, s)];
        r.dx[at(i, c, s)] = static_cast<float>(wc * invstd * g);
      }
    r.mean.push_back(static_cast<float>(mean));
    r.var.push_back(static_cast<float>(var));
    r.dw.push_back(static_cast<float>(sdyx * invstd));
    r.db.push_back(static_cast<float>(sdy));
  }
  return r;
}

TEST(BackendBatchnorm, ForwardAndBackwardMatchTwoPassDoublesOnEveryBackend) {
  const float eps = 1e-5f;
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    // The last shape gives the CUDA backend's channels-innermost sums a partial tile of 32
    // channels and seven splits of the rows (229 rows each, the last 226: a remainder in every
    // block's row lanes).
    for (const Shape& shape : {Shape{2, 3, 3, 5}, Shape{2, 32, 3, 5}, Shape{4, 40, 20, 20}}) {
      const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
      const Tensor hx = host_random({N, C, H, W}, 1 + C, -1.0f, 3.0f), hgy = host_random({N, C, H, W}, 2 + C);
      const Tensor hw = host_random({C}, 3 + C, 0.5f, 1.5f), hb = host_random({C}, 4 + C);
      const Tensor hmean = host_random({C}, 5 + C), hvar = host_random({C}, 6 + C, 0.5f, 2.0f);
      for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
        if (channel_block(l) && C % channel_block(l) != 0) continue;
        for (const bool affine : {true, false}) {
          SCOPED_TRACE(fmt::format("C={} {} affine={}", C, layout_name(l), affine));
          const Tensor x = b->to_layout(hx.to(b->device()), l), gy = b->to_layout(hgy.to(b->device()), l);
          const Tensor w = affine ? hw.to(b->device()) : Tensor(), bias = affine ? hb.to(b->device()) : Tensor();
          const std::vector<float> wv = affine ? hw.to_vector() : std::vector<float>();
          const std::vector<float> bv = affine ? hb.to_vector() : std::vector<float>();

          // Training: batch statistics.
          const BnReference t = reference(hx.to_vector(), hgy.to_vector(), wv, bv, N, C, H * W, eps, true, {}, {});
          Tensor y, mean, var;
          b->batchnorm_forward_training(x, w, bias, eps, y, mean, var);
          EXPECT_EQ(y.layout(), l);
          expect_close(host_values(y), t.y, 1e-4f, 1e-4f, "y");
          expect_close(host_values(mean), t.mean, 1e-5f, 1e-5f, "mean");
          expect_close(host_values(var), t.var, 1e-5f, 1e-5f, "var");
          Tensor dx, dw, db;
          b->batchnorm_backward(x, gy, w, affine, mean, var, eps, false, dx, dw, db);
          EXPECT_EQ(dx.layout(), l);
          expect_close(host_values(dx), t.dx, 1e-4f, 1e-4f, "dx");
          EXPECT_EQ(dw.defined(), affine);
          EXPECT_EQ(db.defined(), affine);
          if (affine) {
            expect_close(host_values(dw), t.dw, 1e-4f, 1e-4f, "dweight");
            expect_close(host_values(db), t.db, 1e-4f, 1e-4f, "dbias");
          }

          // Inference: given statistics, constants for backward.
          const BnReference e = reference(hx.to_vector(), hgy.to_vector(), wv, bv, N, C, H * W, eps, false,
                                          hmean.to_vector(), hvar.to_vector());
          const Tensor m = hmean.to(b->device()), v = hvar.to(b->device());
          const Tensor ye = b->batchnorm_forward_inference(x, w, bias, m, v, eps);
          EXPECT_EQ(ye.layout(), l);
          expect_close(host_values(ye), e.y, 1e-4f, 1e-4f, "inference y");
          Tensor edx, edw, edb;
          b->batchnorm_backward(x, gy, w, affine, m, v, eps, true, edx, edw, edb);
          expect_close(host_values(edx), e.dx, 1e-4f, 1e-4f, "global-stats dx");
          if (affine) {
            expect_close(host_values(edw), e.dw, 1e-4f, 1e-4f, "global-stats dweight");
            expect_close(host_values(edb), e.db, 1e-4f, 1e-4f, "global-stats dbias");
          }
        }
      }
    }
  }
}

// A backend that reads a 16-bit x as it is (autocast's batchnorm input, batchnorm_reads) computes
// what it computes from that x's f32 copy: each value widens exactly, so the statistics and
// gradients agree to the float sums' order (the same bits in the blocked layouts) and y is the f32
// y rounded once to the 16-bit dtype.
TEST(BackendBatchnorm, A16BitInputGivesItsF32CopysResults) {
  const float eps = 1e-5f;
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (DType half : {DType::bf16, DType::f16}) {
      if (b->device().is_cpu()) EXPECT_TRUE(b->batchnorm_reads(half));  // the CPU's loops read both
      if (!b->batchnorm_reads(half)) continue;
      // 78 positions a plane: the CPU's blocked slabs span 2-3 of its 512-value chunks, the last partial.
      const int64_t N = 4, C = 32, H = 6, W = 13;
      const Tensor hx = host_random({N, C, H, W}, 11, -1.0f, 3.0f), hgy = host_random({N, C, H, W}, 12);
      const Tensor w = host_random({C}, 13, 0.5f, 1.5f).to(b->device()), bias = host_random({C}, 14).to(b->device());
      for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c}) {
        SCOPED_TRACE(fmt::format("{} {}", dtype_name(half), layout_name(l)));
        const Tensor x16 = b->to_layout(hx.to(b->device()), l).to(half);  // (N, C, H, W) 16-bit
        const Tensor x32 = x16.to(DType::f32), gy = b->to_layout(hgy.to(b->device()), l);
        Tensor y16, m16, v16, y32, m32, v32;
        b->batchnorm_forward_training(x16, w, bias, eps, y16, m16, v16);
        b->batchnorm_forward_training(x32, w, bias, eps, y32, m32, v32);
        EXPECT_EQ(y16.dtype(), half);
        EXPECT_EQ(y16.layout(), l);
        const float ulp = half == DType::bf16 ? 1.0f / 128 : 1.0f / 1024;  // the 16-bit dtype's, relative
        expect_close(host_values(y16.to(DType::f32)), host_values(y32.to(half).to(DType::f32)), ulp, 1e-6f, "y");
        expect_close(host_values(m16), host_values(m32), 1e-6f, 1e-6f, "mean");
        expect_close(host_values(v16), host_values(v32), 1e-6f, 1e-6f, "var");
        const Tensor ye16 = b->batchnorm_forward_inference(x16, w, bias, m32, v32, eps);
        EXPECT_EQ(ye16.dtype(), half);
        EXPECT_EQ(host_values(ye16.to(DType::f32)),  // one elementwise pass: the same bits
                  host_values(b->batchnorm_forward_inference(x32, w, bias, m32, v32, eps).to(half).to(DType::f32)));
        Tensor dx16, dw16, db16, dx32, dw32, db32;
        b->batchnorm_backward(x16, gy, w, true, m32, v32, eps, false, dx16, dw16, db16);
        b->batchnorm_backward(x32, gy, w, true, m32, v32, eps, false, dx32, dw32, db32);
        EXPECT_EQ(dx16.dtype(), DType::f32);
        expect_close(host_values(dx16), host_values(dx32), 1e-5f, 1e-5f, "dx");
        expect_close(host_values(dw16), host_values(dw32), 1e-5f, 1e-5f, "dweight");
        expect_close(host_values(db16), host_values(db32), 1e-5f, 1e-5f, "dbias");
      }
    }
  }
}

TEST(BackendBatchnorm, RunningStatisticsAndTheBatchCounterUpdateInPlaceOnEveryBackend) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t C = 19;
    const Tensor hm = host_random({C}, 1), hv = host_random({C}, 3, 0.5f, 2.0f);
    const Tensor hbatch_m = host_random({C}, 2), hbatch_v = host_random({C}, 4, 0.5f, 2.0f);
    const float momentum = 0.1f;
    const double correction = 30.0 / 29.0;
    auto expected = [&](const Tensor& running, const Tensor& batch, double k) {
      std::vector<float> want;
      for (int64_t c = 0; c < C; ++c)
        want.push_back(static_cast<float>((1.0 - momentum) * running.to_vector()[static_cast<size_t>(c)] +
                                          momentum * k * batch.to_vector()[static_cast<size_t>(c)]));
      return want;
    };
    Tensor running_mean = hm.to(b->device()).clone(), running_var = hv.to(b->device()).clone();
    Tensor count = Tensor::zeros(Shape{}, DType::i64).to(b->device());
    b->batchnorm_update_running(running_mean, running_var, &count, hbatch_m.to(b->device()), hbatch_v.to(b->device()),
                                momentum, correction);
    expect_close(host_values(running_mean), expected(hm, hbatch_m, 1.0), 1e-7f, 0.0f, "running mean");
    expect_close(host_values(running_var), expected(hv, hbatch_v, correction), 1e-7f, 0.0f, "running var");
    const std::string m = testing::message_of([&] {
      b->batchnorm_update_running(running_mean, running_var, nullptr, hbatch_m.to(b->device()),
                                  Tensor::zeros({C + 1}).to(b->device()), momentum, correction);
    });
    EXPECT_NE(m.find("must be (C) f32 tensors of one size"), std::string::npos) << m;

    // The counter: once a call; without one, the statistics alone.
    for (int i = 0; i < 2; ++i)
      b->batchnorm_update_running(running_mean, running_var, &count, hbatch_m.to(b->device()),
                                  hbatch_v.to(b->device()), momentum, correction);
    b->batchnorm_update_running(running_mean, running_var, nullptr, hbatch_m.to(b->device()), hbatch_v.to(b->device()),
                                momentum, correction);
    EXPECT_EQ(host_values(count), std::vector<float>{3.0f});
  }
}

}  // namespace
}  // namespace packrat
