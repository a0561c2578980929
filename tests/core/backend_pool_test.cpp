// The backend test, pooling section: max pooling (with the argmax within each window), average
// pooling with and without the padding in the divisor, and adaptive average pooling with uneven
// windows, forward and backward, on every backend against naive loops, plain and blocked.
#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

struct PoolReference {
  std::vector<float> y, argmax, dx;
};

// x (N, C, H, W) and gy (N, C, OH, OW) plain.
PoolReference reference(const PoolGeometry& g, PoolKind kind, const std::vector<float>& x,
                        const std::vector<float>& gy) {
  PoolReference r;
  r.dx.assign(x.size(), 0.0f);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t i = 0; i < g.OH; ++i)
      for (int64_t j = 0; j < g.OW; ++j) {
        const float gv = gy[static_cast<size_t>((nc * g.OH + i) * g.OW + j)];
        double best = -1e30, sum = 0;
        int64_t best_k = -1, best_at = -1, valid = 0;
        for (int64_t kh = 0; kh < g.KH; ++kh)
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const int64_t h = i * g.stride_h - g.pad_h + kh, w = j * g.stride_w - g.pad_w + kw;
            if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
            const int64_t at = (nc * g.H + h) * g.W + w;
            const float v = x[static_cast<size_t>(at)];
            ++valid;
            sum += v;
            if (v > best) best = v, best_k = kh * g.KW + kw, best_at = at;
          }
        if (kind == PoolKind::Max) {
          r.y.push_back(static_cast<float>(best));
          r.argmax.push_back(static_cast<float>(best_k));
          r.dx[static_cast<size_t>(best_at)] += gv;
          continue;
        }
        const double div = kind == PoolKind::AvgIncludePadding ? double(g.KH * g.KW) : double(valid);
        r.y.push_back(static_cast<float>(sum / div));
        for (int64_t kh = 0; kh < g.KH; ++kh)
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const int64_t h = i * g.stride_h - g.pad_h + kh, w = j * g.stride_w - g.pad_w + kw;
            if (h >= 0 && h < g.H && w >= 0 && w < g.W)
              r.dx[static_cast<size_t>((nc * g.H + h) * g.W + w)] += static_cast<float>(gv / div);
          }
      }
  return r;
}

PoolGeometry geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t stride, int64_t pad) {
  PoolGeometry g{N, C, H, W, 0, 0, K, K, stride, stride, pad, pad};
  g.OH = (H + 2 * pad - K) / stride + 1;
  g.OW = (W + 2 * pad - K) / stride + 1;
  return g;
}

TEST(BackendPool, MaxAndAveragePoolingMatchNaiveLoopsOnEveryBackend) {
  struct Case {
    PoolGeometry g;
    PoolKind kind;
  };
  const std::vector<Case> cases = {
      {geometry(2, 16, 7, 7, 3, 2, 1), PoolKind::Max},
      {geometry(1, 3, 6, 5, 2, 2, 0), PoolKind::Max},
      {geometry(1, 2, 16, 16, 16, 1, 0), PoolKind::Max},  // a 256-element window: wider indices
      {geometry(2, 16, 6, 6, 3, 1, 1), PoolKind::AvgIncludePadding},
      {geometry(1, 3, 7, 6, 3, 2, 1), PoolKind::AvgExcludePadding},
      {geometry(2, 32, 4, 4, 4, 4, 0), PoolKind::AvgExcludePadding},
      // Global averages (squeeze-and-excitation's), direct loops on the CPU's plain buffers.
      {geometry(3, 40, 2, 2, 2, 2, 0), PoolKind::AvgIncludePadding},
      {geometry(2, 5, 32, 32, 32, 1, 0), PoolKind::AvgExcludePadding}};
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    EXPECT_EQ(b->pool_index_dtype(9), DType::u8);
    EXPECT_EQ(b->pool_index_dtype(256), DType::i32);
    for (size_t k = 0; k < cases.size(); ++k) {
      const PoolGeometry& g = cases[k].g;
      const PoolKind kind = cases[k].kind;
      const Tensor hx = host_random({g.N, g.C, g.H, g.W}, 10 + k), hgy = host_random({g.N, g.C, g.OH, g.OW}, 20 + k);
      const PoolReference want = reference(g, kind, hx.to_vector(), hgy.to_vector());
      for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
        if (channel_block(l) && g.C % channel_block(l) != 0) continue;
        SCOPED_TRACE(fmt::format("case {} {}", k, layout_name(l)));
        const Tensor x = b->to_layout(hx.to(b->device()), l);
        const Tensor gy = b->to_layout(hgy.to(b->device()), l);
        Tensor argmax;
        const Tensor y = b->pool_forward(x, g, kind, kind == PoolKind::Max ? &argmax : nullptr);
        EXPECT_EQ(y.layout(), l);
        expect_close(host_values(y), want.y, 1e-6f, 1e-6f, "y");
        EXPECT_EQ(host_values(b->pool_forward(x, g, kind, nullptr)), host_values(y)) << "inference forward";
        if (kind == PoolKind::Max) {
          EXPECT_EQ(argmax.dtype(), b->pool_index_dtype(g.KH * g.KW));
          EXPECT_EQ(argmax.shape(), y.shape());
          EXPECT_EQ(argmax.layout(), l);
          EXPECT_EQ(host_values(argmax), want.argmax);
        }
        const Tensor dx = b->pool_backward(gy, argmax, g, kind, l);
        EXPECT_EQ(dx.layout(), l);
        expect_close(host_values(dx), want.dx, 1e-5f, 1e-6f, "dx");
      }
    }
  }
}

TEST(BackendPool, AdaptiveAveragePoolingWithUnevenWindowsMatchesNaiveLoopsOnEveryBackend) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const int64_t N = 2, C = 16, H = 7, W = 5, OH = 3, OW = 2;
    const Tensor hx = host_random({N, C, H, W}, 1), hgy = host_random({N, C, OH, OW}, 2);
    const std::vector<float> x = hx.to_vector(), gy = hgy.to_vector();
    std::vector<float> y, dx(x.size(), 0.0f);
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          const int64_t h0 = Backend::adaptive_window_begin(i, H, OH), h1 = Backend::adaptive_window_end(i, H, OH);
          const int64_t w0 = Backend::adaptive_window_begin(j, W, OW), w1 = Backend::adaptive_window_end(j, W, OW);
          const double count = double((h1 - h0) * (w1 - w0));
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += x[static_cast<size_t>((nc * H + h) * W + w)];
          y.push_back(static_cast<float>(s / count));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w)
              dx[static_cast<size_t>((nc * H + h) * W + w)] +=
                  static_cast<float>(gy[static_cast<size_t>((nc * OH + i) * OW + j)] / count);
        }
    // PyTorch's windows for 7 -> 3: [0, 3), [2, 5), [4, 7) (overlapping).
    EXPECT_EQ(Backend::adaptive_window_begin(1, 7, 3), 2);
    EXPECT_EQ(Backend::adaptive_window_end(1, 7, 3), 5);
    for (Layout l : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
      SCOPED_TRACE(layout_name(l));
      const Tensor xd = b->to_layout(hx.to(b->device()), l);
      const Tensor yd = b->adaptive_avgpool_forward(xd, OH, OW);
      EXPECT_EQ(yd.layout(), l);
      expect_close(host_values(yd), y, 1e-6f, 1e-6f, "y");
      for (Layout gl : {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
        const Tensor dxd = b->adaptive_avgpool_backward(b->to_layout(hgy.to(b->device()), gl), hx.shape(), l);
        EXPECT_EQ(dxd.layout(), l);
        expect_close(host_values(dxd), dx, 1e-6f, 1e-6f, "dx");
      }
    }
  }
}

}  // namespace
}  // namespace packrat
