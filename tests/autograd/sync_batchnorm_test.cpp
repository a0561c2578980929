// Synchronised batchnorm (autograd/batchnorm_sync.h) without MPI: two threads stand for two
// processes (the tape is per thread), their sums meet at a barrier. Two "processes" with half a
// batch each must compute what batchnorm2d computes on the whole batch: outputs, input
// gradients, and (summed, as the data-parallel reducer weighs them) parameter gradients and the
// running statistics. Plus the central-difference gradient check of the one-process case.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "autograd/batchnorm_sync.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::gradcheck;
using packrat::testing::random_tensor;

namespace {

// Sums float buffers over `parties` threads: each adds its buffer in, all wait, all copy out.
class ThreadSum {
 public:
  explicit ThreadSum(int parties) : parties_(parties), arrive_(parties), leave_(parties) {}
  void sum(double* data, int64_t count) {
    {
      std::lock_guard lock(m_);
      if (acc_.empty()) acc_.assign(static_cast<size_t>(count), 0.0);
      for (int64_t i = 0; i < count; ++i) acc_[static_cast<size_t>(i)] += data[i];
    }
    arrive_.arrive_and_wait();
    for (int64_t i = 0; i < count; ++i) data[i] = acc_[static_cast<size_t>(i)];
    if (++read_ == parties_) {
      acc_.clear();
      read_ = 0;
    }
    leave_.arrive_and_wait();
  }

 private:
  int parties_;
  std::barrier<> arrive_, leave_;
  std::mutex m_;
  std::vector<double> acc_;
  std::atomic<int> read_{0};
};

Tensor rows(const Tensor& x, int64_t begin, int64_t end) {  // x[begin:end] of (N, ...)
  const std::vector<float> v = x.to_vector();
  const int64_t per = x.numel() / x.dim(0);
  Shape s = x.shape();
  s[0] = end - begin;
  return Tensor::from_vector(s, std::vector<float>(v.begin() + begin * per, v.begin() + end * per));
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << what << " [" << i << "]";
}

}  // namespace

// One process (the sum is the identity): the same op as batchnorm2d's, gradient-checked.
TEST(SyncBatchNormOpGrad, OneProcess) {
  BatchnormSync alone{[](double*, int64_t, std::string_view) {}};
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0f);
  auto p = [](const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    Tensor t = random_tensor(s, seed, lo, hi);
    t.set_requires_grad(true);
    return t;
  };
  gradcheck([&](const std::vector<Tensor>& t) {
    return ops::sync_batchnorm2d(t[0], t[1], t[2], rm, rv, 0.1f, 1e-5f, alone);
  }, {p({2, 3, 3, 3}, 1), p({3}, 2, 0.5f, 1.5f), p({3}, 3)});
}

// Samples 0-1 on one thread and 2-4 on the other (uneven shares: 2/5 and 3/5).
TEST(SyncBatchNormOp, TwoProcessesOfPartBatchesComputeTheWholeBatch) {
  const int64_t N = 5, C = 3, H = 4, W = 3;
  const Tensor x = random_tensor({N, C, H, W}, 11, -2.0f, 3.0f);
  const Tensor gy = random_tensor({N, C, H, W}, 12);
  const Tensor w0 = random_tensor({C}, 13, 0.5f, 1.5f), b0 = random_tensor({C}, 14);

  // The whole batch in one process.
  Tensor xr = x.clone(), wr = w0.clone(), br = b0.clone();
  xr.set_requires_grad(true);
  wr.set_requires_grad(true);
  br.set_requires_grad(true);
  Tensor rm_ref = Tensor::full({C}, 0.5f), rv_ref = Tensor::full({C}, 2.0f);
  const Tensor y_ref = ops::batchnorm2d(xr, wr, br, rm_ref, rv_ref, true, 0.1f, 1e-5f);
  backward(y_ref, gy);

  ThreadSum threads(2);
  BatchnormSync sync{[&](double* d, int64_t n, std::string_view) { threads.sum(d, n); }};
  const int64_t split[3] = {0, 2, N};
  std::vector<float> y(static_cast<size_t>(x.numel())), dx(static_cast<size_t>(x.numel()));
  std::vector<std::vector<float>> dw(2), db(2), rm(2), rv(2);
  auto process = [&](int r) {
    const int64_t lo = split[r], hi = split[r + 1];
    Tensor xp = rows(x, lo, hi), w = w0.clone(), b = b0.clone();
    xp.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor m = Tensor::full({C}, 0.5f), v = Tensor::full({C}, 2.0f);
    Tensor yp = ops::sync_batchnorm2d(xp, w, b, m, v, 0.1f, 1e-5f, sync);
    // This process's loss is the mean over its own samples: gy scaled by N / n_r.
    const double share = static_cast<double>(hi - lo) / N;
    backward(yp, backend_of(yp).scale(rows(gy, lo, hi), 1.0 / share));
    const auto yv = yp.to_vector(), dxv = xp.grad().to_vector();
    const int64_t per = C * H * W;
    for (int64_t i = 0; i < (hi - lo) * per; ++i) {
      y[static_cast<size_t>(lo * per + i)] = yv[static_cast<size_t>(i)];
      dx[static_cast<size_t>(lo * per + i)] = static_cast<float>(dxv[static_cast<size_t>(i)] * share);
    }
    dw[r] = backend_of(yp).scale(w.grad(), share).to_vector();  // the reducer's weighting
    db[r] = backend_of(yp).scale(b.grad(), share).to_vector();
    rm[r] = m.to_vector();
    rv[r] = v.to_vector();
  };
  std::thread other(process, 1);
  process(0);
  other.join();

  expect_near(y, y_ref.to_vector(), 1e-5, "y");
  expect_near(dx, xr.grad().to_vector(), 1e-5, "dx");
  std::vector<float> dw_sum(C), db_sum(C);
  for (int64_t c = 0; c < C; ++c) {
    dw_sum[static_cast<size_t>(c)] = dw[0][static_cast<size_t>(c)] + dw[1][static_cast<size_t>(c)];
    db_sum[static_cast<size_t>(c)] = db[0][static_cast<size_t>(c)] + db[1][static_cast<size_t>(c)];
  }
  expect_near(dw_sum, wr.grad().to_vector(), 1e-5, "dweight");
  expect_near(db_sum, br.grad().to_vector(), 1e-5, "dbias");
  for (int r = 0; r < 2; ++r) {
    expect_near(rm[r], rm_ref.to_vector(), 1e-6, "running_mean");
    expect_near(rv[r], rv_ref.to_vector(), 1e-5, "running_var");
  }
}

TEST(SyncBatchNormOp, NeedsAnAffineLayer) {
  BatchnormSync alone{[](double*, int64_t, std::string_view) {}};
  Tensor rm = Tensor::zeros({2}), rv = Tensor::full({2}, 1.0f);
  const std::string m = packrat::testing::message_of([&] {
    ops::sync_batchnorm2d(random_tensor({2, 2, 2, 2}, 1), Tensor(), Tensor(), rm, rv, 0.1f, 1e-5f, alone);
  });
  EXPECT_NE(m.find("needs an affine layer"), std::string::npos) << m;
}

// On oneDNN's blocked layout (how ResNets hold activations) one process matches batchnorm2d.
TEST(SyncBatchNormOp, OneProcessMatchesBatchnorm2dOnBlockedLayout) {
  BatchnormSync alone{[](double*, int64_t, std::string_view) {}};
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t N = 8, C = 32, H = 3, W = 3;
    Tensor x0 = random_tensor({N, C, H, W}, 21 + trial, -2.0f, 3.0f).to_layout(Layout::nChw16c);
    const Tensor gy = random_tensor({N, C, H, W}, 22).to_layout(Layout::nChw16c);
    const Tensor w0 = random_tensor({C}, 23, 0.5f, 1.5f), b0 = random_tensor({C}, 24);
    auto run = [&](bool sync, std::vector<float>& dx, std::vector<float>& dw, std::vector<float>& y) {
      Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      Tensor rm = Tensor::zeros({C}), rv = Tensor::full({C}, 1.0f);
      Tensor out = sync ? ops::sync_batchnorm2d(x, w, b, rm, rv, 0.1f, 1e-5f, alone)
                        : ops::batchnorm2d(x, w, b, rm, rv, true, 0.1f, 1e-5f);
      backward(out, gy);
      dx = x.grad().to_plain().to_vector();
      dw = w.grad().to_vector();
      y = out.to_plain().to_vector();
    };
    std::vector<float> dx1, dw1, y1, dx2, dw2, y2;
    run(false, dx1, dw1, y1);
    run(true, dx2, dw2, y2);
    expect_near(y2, y1, 1e-5, "y");
    expect_near(dw2, dw1, 1e-4, "dw");
    expect_near(dx2, dx1, 1e-4, "dx");
  }
}
