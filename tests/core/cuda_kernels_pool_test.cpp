// The CUDA pooling kernels' per-index bodies (core/cuda/kernels/pool.h), run on the host over
// the indices a GPU would give them and compared with the CPU backend: max pooling's values and
// argmax (ties included), average pooling with and without the padding, the gather backwards,
// and adaptive pooling with uneven and overlapping windows. No GPU needed.
#include <cmath>

#include "core/cuda/kernels/pool.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using cuda::PoolShape;
using testing::expect_close;
using testing::host_random;
using testing::run_on_host;

PoolGeometry geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t stride_h,
                      int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  PoolGeometry g{N, C, H, W, 0, 0, KH, KW, stride_h, stride_w, pad_h, pad_w};
  g.OH = (H + 2 * pad_h - KH) / stride_h + 1;
  g.OW = (W + 2 * pad_w - KW) / stride_w + 1;
  return g;
}

PoolShape shape_of(const PoolGeometry& g) {
  return {g.N, g.C, g.H, g.W, g.OH, g.OW, g.KH, g.KW, g.stride_h, g.stride_w, g.pad_h, g.pad_w};
}

std::vector<float> as_floats(const Tensor& t) { return t.to_vector(); }

// Values on a grid of 0.5 so that windows hold ties: the first maximum must win, as on the CPU.
Tensor with_ties(const Shape& s, uint64_t seed) {
  Tensor t = host_random(s, seed, -2.0f, 2.0f);
  for (float& v : t.span<float>()) v = std::round(v * 2.0f) / 2.0f;
  return t;
}

const std::vector<PoolGeometry>& cases() {
  static const std::vector<PoolGeometry> all = {
      geometry(2, 3, 7, 7, 3, 3, 2, 2, 1, 1),    // ResNet's stem pool: overlapping, padded
      geometry(1, 2, 6, 5, 2, 2, 2, 2, 0, 0),    // tiling windows, odd width
      geometry(1, 2, 9, 8, 3, 2, 1, 2, 1, 0),    // asymmetric window, stride and padding
      geometry(2, 1, 5, 7, 4, 3, 1, 1, 2, 1),    // windows larger than the stride: many overlaps
      geometry(1, 2, 16, 16, 16, 16, 1, 1, 0, 0),  // a 256-element window: i32 indices
  };
  return all;
}

TEST(CudaKernelsPool, MaxPoolingValuesArgmaxAndGradientMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  for (size_t k = 0; k < cases().size(); ++k) {
    const PoolGeometry& g = cases()[k];
    for (bool ties : {false, true}) {
      SCOPED_TRACE(fmt::format("case {} ties={}", k, ties));
      const Tensor x = ties ? with_ties({g.N, g.C, g.H, g.W}, 10 + k) : host_random({g.N, g.C, g.H, g.W}, 10 + k);
      const Tensor gy = host_random({g.N, g.C, g.OH, g.OW}, 20 + k);
      Tensor want_argmax;
      const Tensor want_y = cpu.pool_forward(x, g, PoolKind::Max, &want_argmax);
      const Tensor want_dx = cpu.pool_backward(gy, want_argmax, g, PoolKind::Max, Layout::Plain);

      const DType index_dtype = cpu.pool_index_dtype(g.KH * g.KW);
      Tensor y = Tensor::empty(want_y.shape()), argmax = Tensor::empty(want_y.shape(), index_dtype);
      Tensor dx = Tensor::empty(x.shape());
      if (index_dtype == DType::i32) {
        run_on_host(y.numel(), cuda::MaxPoolForward<int32_t>{x.data<float>(), y.data<float>(),
                                                             static_cast<int32_t*>(argmax.raw()), shape_of(g)});
        run_on_host(dx.numel(), cuda::MaxPoolBackward<int32_t>{gy.data<float>(), static_cast<int32_t*>(argmax.raw()),
                                                               dx.data<float>(), shape_of(g)});
      } else {
        run_on_host(y.numel(), cuda::MaxPoolForward<uint8_t>{x.data<float>(), y.data<float>(),
                                                             static_cast<uint8_t*>(argmax.raw()), shape_of(g)});
        run_on_host(dx.numel(), cuda::MaxPoolBackward<uint8_t>{gy.data<float>(), static_cast<uint8_t*>(argmax.raw()),
                                                               dx.data<float>(), shape_of(g)});
      }
      EXPECT_EQ(as_floats(y), as_floats(want_y));
      EXPECT_EQ(as_floats(argmax), as_floats(want_argmax));
      expect_close(as_floats(dx), as_floats(want_dx), 1e-6f, 1e-6f, "dx");

      Tensor y_inference = Tensor::empty(want_y.shape());  // no argmax buffer
      run_on_host(y.numel(), cuda::MaxPoolForward<uint8_t>{x.data<float>(), y_inference.data<float>(), nullptr,
                                                           shape_of(g)});
      EXPECT_EQ(as_floats(y_inference), as_floats(want_y));
    }
  }
}

TEST(CudaKernelsPool, AveragePoolingWithAndWithoutPaddingMatchesTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  for (size_t k = 0; k < cases().size(); ++k) {
    const PoolGeometry& g = cases()[k];
    for (PoolKind kind : {PoolKind::AvgIncludePadding, PoolKind::AvgExcludePadding}) {
      const bool include = kind == PoolKind::AvgIncludePadding;
      SCOPED_TRACE(fmt::format("case {} include_padding={}", k, include));
      const Tensor x = host_random({g.N, g.C, g.H, g.W}, 30 + k), gy = host_random({g.N, g.C, g.OH, g.OW}, 40 + k);
      const Tensor want_y = cpu.pool_forward(x, g, kind, nullptr);
      const Tensor want_dx = cpu.pool_backward(gy, Tensor(), g, kind, Layout::Plain);
      Tensor y = Tensor::empty(want_y.shape()), dx = Tensor::empty(x.shape());
      run_on_host(y.numel(), cuda::AvgPoolForward{x.data<float>(), y.data<float>(), shape_of(g), include});
      run_on_host(dx.numel(), cuda::AvgPoolBackward{gy.data<float>(), dx.data<float>(), shape_of(g), include});
      expect_close(as_floats(y), as_floats(want_y), 1e-6f, 1e-6f, "y");
      expect_close(as_floats(dx), as_floats(want_dx), 1e-6f, 1e-6f, "dx");
    }
  }
}

TEST(CudaKernelsPool, GatherRangesListExactlyTheOutputsWhoseWindowsHoldAnInput) {
  for (int64_t k : {1, 2, 3, 5})
    for (int64_t stride : {1, 2, 3})
      for (int64_t pad = 0; pad < k; ++pad) {
        const int64_t in = 11, out = (in + 2 * pad - k) / stride + 1;
        for (int64_t h = 0; h < in; ++h) {
          const cuda::OutputRange r = cuda::outputs_holding(h, k, stride, pad, out);
          for (int64_t o = 0; o < out; ++o) {
            const bool holds = o * stride - pad <= h && h < o * stride - pad + k;
            EXPECT_EQ(holds, o >= r.lo && o < r.hi) << "k " << k << " stride " << stride << " pad " << pad << " h "
                                                    << h << " o " << o;
          }
        }
      }
  for (int64_t in : {1, 3, 7, 10})
    for (int64_t out : {1, 2, 3, 5, 7, 13})
      for (int64_t h = 0; h < in; ++h) {
        const cuda::OutputRange r = cuda::adaptive_outputs_holding(h, in, out);
        for (int64_t o = 0; o < out; ++o) {
          const bool holds = Backend::adaptive_window_begin(o, in, out) <= h && h < Backend::adaptive_window_end(o, in, out);
          EXPECT_EQ(holds, o >= r.lo && o < r.hi) << "in " << in << " out " << out << " h " << h << " o " << o;
        }
      }
}

TEST(CudaKernelsPool, TheKernelsAdaptiveWindowsAreTheBackendContracts) {
  for (int64_t in = 1; in < 20; ++in)
    for (int64_t out = 1; out < 20; ++out)
      for (int64_t i = 0; i < out; ++i) {
        EXPECT_EQ(adaptive_window_begin(i, in, out), Backend::adaptive_window_begin(i, in, out));
        EXPECT_EQ(adaptive_window_end(i, in, out), Backend::adaptive_window_end(i, in, out));
      }
}

TEST(CudaKernelsPool, AdaptiveAveragePoolingMatchesTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  struct Case {
    int64_t H, W, OH, OW;
  };
  // Uneven and overlapping windows (7 -> 3), more outputs than inputs (3 -> 5), global pooling.
  for (const Case c : {Case{7, 5, 3, 2}, Case{3, 4, 5, 7}, Case{6, 6, 1, 1}, Case{9, 11, 4, 4}}) {
    SCOPED_TRACE(fmt::format("{}x{} -> {}x{}", c.H, c.W, c.OH, c.OW));
    const int64_t N = 2, C = 3;
    const Tensor x = host_random({N, C, c.H, c.W}, 1), gy = host_random({N, C, c.OH, c.OW}, 2);
    const Tensor want_y = cpu.adaptive_avgpool_forward(x, c.OH, c.OW);
    const Tensor want_dx = cpu.adaptive_avgpool_backward(gy, x.shape(), Layout::Plain);
    Tensor y = Tensor::empty(want_y.shape()), dx = Tensor::empty(x.shape());
    run_on_host(y.numel(), cuda::AdaptiveAvgPoolForward{x.data<float>(), y.data<float>(), c.H, c.W, c.OH, c.OW});
    run_on_host(dx.numel(), cuda::AdaptiveAvgPoolBackward{gy.data<float>(), dx.data<float>(), c.H, c.W, c.OH, c.OW});
    EXPECT_EQ(as_floats(y), as_floats(want_y));
    expect_close(as_floats(dx), as_floats(want_dx), 1e-6f, 1e-6f, "dx");
  }
}

}  // namespace
}  // namespace packrat
