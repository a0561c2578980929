// CpuBackend: pooling on oneDNN (core/cpu/pooling.h), and as direct loops: adaptive average
// pooling with uneven windows over plain or blocked buffers, and global average pooling over
// plain ones (squeeze-and-excitation's), where oneDNN has only its slow reference kernel.
#include "core/cpu/cpu_backend.h"

#include <algorithm>

#include "core/cpu/dnnl_context.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"
#include "core/cpu/pooling.h"
#include "core/parallel.h"

namespace packrat::cpu {

namespace {

// An average over each whole H x W plane of a plain tensor. oneDNN 2.6 serves plain pooling with
// its simple_nchw kernel: 0.7 GB/s on EfficientNet-B0's 2x2 planes, 7% of its step on an AVX2
// EPYC (its jit kernels need nChw8c / nChw16c).
bool plain_global_average(const PoolGeometry& g, PoolKind kind, Layout layout) {
  return layout == Layout::Plain && kind != PoolKind::Max && g.OH == 1 && g.OW == 1 && g.KH == g.H && g.KW == g.W &&
         g.pad_h == 0 && g.pad_w == 0;
}

}  // namespace

Tensor CpuBackend::pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) {
  if (argmax || !plain_global_average(g, kind, x.layout())) return cpu::pool_forward(x, g, kind, argmax);
  const int64_t HW = g.H * g.W;
  Tensor y = empty_cpu(Shape{g.N, g.C, 1, 1}, x.dtype());  // (N, C, 1, 1)
  // f32, or bf16 read as its f32 values (pool_reads)
  auto average = [&]<typename T>(const T* src, T* dst) {
    rows_for(g.N * g.C, HW, [&](int64_t nc) {
      const T* plane = src + nc * HW;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < HW; ++i) sum += to_f32(plane[i]);
      dst[nc] = from_f32<T>(sum / static_cast<float>(HW));
    });
  };
  if (x.dtype() == DType::bf16)
    average(x.data<bf16_t>(), y.data<bf16_t>());
  else
    average(x.data<float>(), y.data<float>());
  return y;
}

Tensor CpuBackend::pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                                 Layout layout) {
  if (!plain_global_average(g, kind, layout)) return cpu::pool_backward(gy, argmax, g, kind, layout);
  const int64_t HW = g.H * g.W;
  const Tensor grad = cpu::to_layout(gy, Layout::Plain);  // (N, C, 1, 1)
  Tensor dx = empty_cpu(Shape{g.N, g.C, g.H, g.W});     // (N, C, H, W)
  const float* src = grad.data<float>();
  float* dst = dx.data<float>();
  rows_for(g.N * g.C, HW, [&](int64_t nc) {
    const float v = src[nc] / static_cast<float>(HW);
    std::fill_n(dst + nc * HW, HW, v);
  });
  return dx;
}

DType CpuBackend::pool_index_dtype(int64_t window) { return pool_workspace_dtype(window); }

Tensor CpuBackend::adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const Layout l = x.layout();
  Tensor y = empty_cpu(Shape{N, C, OH, OW}, DType::f32, l);  // (N, C, OH, OW), x's layout
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  rows_for(N * C, H * W, [&](int64_t nc) {
    const int64_t n = nc / C, c = nc % C;
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = adaptive_window_begin(i, H, OH), h1 = adaptive_window_end(i, H, OH);
        const int64_t w0 = adaptive_window_begin(j, W, OW), w1 = adaptive_window_end(j, W, OW);
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += src[nchw_offset(l, C, H, W, n, c, h, w)];
        dst[nchw_offset(l, C, OH, OW, n, c, i, j)] = static_cast<float>(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  });
  return y;
}

Tensor CpuBackend::adaptive_avgpool_backward(const Tensor& gy_in, const Shape& x_shape, Layout l) {
  const int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  const int64_t OH = gy_in.dim(2), OW = gy_in.dim(3);
  const Tensor gy = cpu::to_layout(gy_in, l);         // (N, C, OH, OW) in l
  Tensor dx = zeros_cpu(x_shape, DType::f32, l);      // (N, C, H, W) in l
  const float* g = gy.data<float>();
  float* d = dx.data<float>();
  rows_for(N * C, H * W, [&](int64_t nc) {
    const int64_t n = nc / C, c = nc % C;
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = adaptive_window_begin(i, H, OH), h1 = adaptive_window_end(i, H, OH);
        const int64_t w0 = adaptive_window_begin(j, W, OW), w1 = adaptive_window_end(j, W, OW);
        const float v = g[nchw_offset(l, C, OH, OW, n, c, i, j)] / static_cast<float>((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) d[nchw_offset(l, C, H, W, n, c, h, w)] += v;
      }
  });
  return dx;
}

}  // namespace packrat::cpu
