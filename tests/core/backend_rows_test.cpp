// The backend test, row section: softmax, cross-entropy with label smoothing and layernorm,
// forward and backward, on every backend against double-precision references written here.
#include <cmath>
#include <string>
#include <vector>

#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

Tensor host_ids(const std::vector<int64_t>& v) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// softmax of each row of D values, in double.
std::vector<double> softmax_rows(const std::vector<float>& x, int64_t D) {
  std::vector<double> p(x.size());
  for (size_t r = 0; r < x.size() / D; ++r) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < D; ++j) mx = std::max<double>(mx, x[r * D + j]);
    for (int64_t j = 0; j < D; ++j) s += std::exp(x[r * D + j] - mx);
    for (int64_t j = 0; j < D; ++j) p[r * D + j] = std::exp(x[r * D + j] - mx) / s;
  }
  return p;
}

TEST(BackendRows, SoftmaxForwardAndBackwardMatchTheReference) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (const Shape& shape : {Shape{3, 7}, Shape{2, 4, 33}, Shape{5}}) {
      const int64_t D = shape[shape.rank() - 1];
      const Tensor hx = host_random(shape, 1, -6.0f, 6.0f), hg = host_random(shape, 2);
      const std::vector<float> xv = hx.to_vector(), gv = hg.to_vector();
      const std::vector<double> p = softmax_rows(xv, D);
      const Tensor y = b->softmax_forward(hx.to(b->device()), 1.0f, DType::f32);
      EXPECT_EQ(y.shape(), shape);
      expect_close(host_values(y), std::vector<float>(p.begin(), p.end()), 1e-5f, 1e-7f, "softmax " + shape.str());
      std::vector<float> want(xv.size());
      for (size_t r = 0; r < xv.size() / D; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += gv[r * D + j] * p[r * D + j];
        for (int64_t j = 0; j < D; ++j) want[r * D + j] = static_cast<float>(p[r * D + j] * (gv[r * D + j] - dot));
      }
      expect_close(host_values(b->softmax_backward(y, hg.to(b->device()), 1.0f, DType::f32)), want, 1e-4f, 1e-6f,
                   "softmax backward " + shape.str());
    }
  }
}

TEST(BackendRows, CrossEntropyWithLabelSmoothingMatchesTheReference) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t N = 5, C = 7;
    const Tensor hx = host_random({N, C}, 3, -4.0f, 4.0f);
    const std::vector<int64_t> t{0, 6, 3, 3, 1};
    const Tensor targets = host_ids(t).to(b->device());
    const std::vector<double> p = softmax_rows(hx.to_vector(), C);
    for (float eps : {0.0f, 0.1f, 1.0f}) {
      double loss = 0;
      for (int64_t n = 0; n < N; ++n) {
        double smooth = 0;
        for (int64_t c = 0; c < C; ++c) smooth -= std::log(p[n * C + c]) / C;
        loss += ((1 - eps) * -std::log(p[n * C + t[n]]) + eps * smooth) / N;
      }
      const auto out = b->cross_entropy_forward(hx.to(b->device()), targets, eps, true, kNoIgnoreIndex);
      EXPECT_EQ(out.count, N);
      EXPECT_EQ(out.loss.shape(), Shape());
      EXPECT_NEAR(host_values(out.loss)[0], loss, 1e-5 * std::abs(loss)) << eps;
      expect_close(host_values(out.probs), std::vector<float>(p.begin(), p.end()), 1e-5f, 1e-7f, "probs");
      EXPECT_FALSE(b->cross_entropy_forward(hx.to(b->device()), targets, eps, false, kNoIgnoreIndex).probs.defined());

      const float g = 0.7f;
      std::vector<float> want(static_cast<size_t>(N * C));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
          const double q = (c == t[n] ? 1 - eps : 0.0) + eps / C;
          want[n * C + c] = static_cast<float>((p[n * C + c] - q) * g / N);
        }
      const Tensor grad_loss = Tensor::full(Shape(), g).to(b->device());
      expect_close(host_values(b->cross_entropy_backward(out.probs, targets, eps, grad_loss, kNoIgnoreIndex, N)), want,
                   1e-5f, 1e-7f,
                   "cross_entropy backward eps " + std::to_string(eps));
    }
    EXPECT_NE(testing::message_of([&] {
                b->cross_entropy_forward(hx.to(b->device()), host_ids({0, 1, 7, 0, 0}).to(b->device()), 0.0f, false,
                                         kNoIgnoreIndex);
              }).find("target 7 of sample 2 is out of range [0, 7)"),
              std::string::npos);
  }
}

// PyTorch's ignore_index: the ignored samples count for nothing, the mean is over the others, their
// gradient rows are 0; every target ignored gives loss 0 and a zero gradient (PyTorch: NaN).
TEST(BackendRows, CrossEntropyIgnoresTargetsEqualToIgnoreIndex) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t N = 6, C = 5;
    const Tensor hx = host_random({N, C}, 7, -4.0f, 4.0f);
    const std::vector<double> p = softmax_rows(hx.to_vector(), C);
    const std::vector<int64_t> t{2, -100, 4, -100, 0, 1};  // samples 1 and 3 ignored
    const Tensor targets = host_ids(t).to(b->device());
    for (float eps : {0.0f, 0.2f}) {
      double loss = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (t[n] == -100) continue;
        double smooth = 0;
        for (int64_t c = 0; c < C; ++c) smooth -= std::log(p[n * C + c]) / C;
        loss += ((1 - eps) * -std::log(p[n * C + t[n]]) + eps * smooth) / 4;
      }
      const auto out = b->cross_entropy_forward(hx.to(b->device()), targets, eps, true, -100);
      EXPECT_EQ(out.count, 4);
      EXPECT_NEAR(host_values(out.loss)[0], loss, 1e-5 * std::abs(loss)) << eps;
      const float g = 0.7f;
      std::vector<float> want(static_cast<size_t>(N * C), 0.0f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C && t[n] != -100; ++c) {
          const double q = (c == t[n] ? 1 - eps : 0.0) + eps / C;
          want[n * C + c] = static_cast<float>((p[n * C + c] - q) * g / 4);
        }
      const Tensor grad_loss = Tensor::full(Shape(), g).to(b->device());
      expect_close(host_values(b->cross_entropy_backward(out.probs, targets, eps, grad_loss, -100, out.count)), want,
                   1e-5f, 1e-7f, "cross_entropy backward, ignoring, eps " + std::to_string(eps));
    }
    // Every target ignored.
    const Tensor none = host_ids(std::vector<int64_t>(N, -100)).to(b->device());
    const auto out = b->cross_entropy_forward(hx.to(b->device()), none, 0.0f, true, -100);
    EXPECT_EQ(out.count, 0);
    EXPECT_EQ(host_values(out.loss)[0], 0.0f);
    const Tensor grad_loss = Tensor::full(Shape(), 1.0f).to(b->device());
    for (float v : host_values(b->cross_entropy_backward(out.probs, none, 0.0f, grad_loss, -100, 0))) EXPECT_EQ(v, 0.0f);
    // Without an ignore_index, -100 is a bad target like any other.
    EXPECT_NE(testing::message_of([&] { b->cross_entropy_forward(hx.to(b->device()), none, 0.0f, false, kNoIgnoreIndex); })
                  .find("target -100 of sample 0 is out of range [0, 5)"),
              std::string::npos);
  }
}

TEST(BackendRows, LayerNormForwardAndBackwardMatchTheReference) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t R = 6, D = 10;
    const Tensor hx = host_random({2, 3, D}, 5, -3.0f, 5.0f), hg = host_random({2, 3, D}, 6);
    const Tensor hw = host_random({D}, 7, 0.5f, 1.5f), hb = host_random({D}, 8);
    const std::vector<float> xv = hx.to_vector(), gv = hg.to_vector(), wv = hw.to_vector(), bv = hb.to_vector();
    const float eps = 1e-5f;
    for (bool affine : {true, false}) {
      const Tensor w = affine ? hw.to(b->device()) : Tensor(), bias = affine ? hb.to(b->device()) : Tensor();
      std::vector<float> y(xv.size()), dx(xv.size()), dw(D, 0.0f), db(D, 0.0f), mean(R), rstd(R);
      std::vector<double> sdw(D, 0.0), sdb(D, 0.0);
      for (int64_t r = 0; r < R; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; ++j) m += xv[r * D + j] / static_cast<double>(D);
        for (int64_t j = 0; j < D; ++j) v += (xv[r * D + j] - m) * (xv[r * D + j] - m) / D;
        const double rs = 1 / std::sqrt(v + eps);
        mean[r] = static_cast<float>(m);
        rstd[r] = static_cast<float>(rs);
        double a = 0, c = 0;  // mean(gh), mean(gh xhat)
        for (int64_t j = 0; j < D; ++j) {
          const double xh = (xv[r * D + j] - m) * rs, gh = gv[r * D + j] * (affine ? wv[j] : 1.0);
          y[r * D + j] = static_cast<float>(affine ? xh * wv[j] + bv[j] : xh);
          a += gh / D;
          c += gh * xh / D;
          sdw[j] += gv[r * D + j] * xh;
          sdb[j] += gv[r * D + j];
        }
        for (int64_t j = 0; j < D; ++j) {
          const double xh = (xv[r * D + j] - m) * rs, gh = gv[r * D + j] * (affine ? wv[j] : 1.0);
          dx[r * D + j] = static_cast<float>(rs * (gh - a - xh * c));
        }
      }
      for (int64_t j = 0; j < D; ++j) {
        dw[j] = static_cast<float>(sdw[j]);
        db[j] = static_cast<float>(sdb[j]);
      }
      const std::string what = affine ? "affine" : "plain";
      const auto out = b->layernorm_forward(hx.to(b->device()), w, bias, eps);
      expect_close(host_values(out.y), y, 1e-5f, 1e-5f, "layernorm y " + what);
      expect_close(host_values(out.mean), mean, 1e-6f, 1e-7f, "layernorm mean " + what);
      expect_close(host_values(out.rstd), rstd, 1e-5f, 0.0f, "layernorm rstd " + what);
      const auto grads = b->layernorm_backward(hx.to(b->device()), out.mean, out.rstd, w, hg.to(b->device()), affine,
                                               affine);
      expect_close(host_values(grads.dx), dx, 1e-4f, 1e-5f, "layernorm dx " + what);
      EXPECT_EQ(grads.dweight.defined(), affine);
      if (affine) {
        expect_close(host_values(grads.dweight), dw, 1e-5f, 1e-5f, "layernorm dweight");
        expect_close(host_values(grads.dbias), db, 1e-5f, 1e-5f, "layernorm dbias");
      }
    }
  }
}

}  // namespace
}  // namespace packrat
