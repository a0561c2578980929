#include "core/cpu/depthwise_conv.h"

#include <vector>

#include "core/cpu/layout.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

constexpr int64_t B = channel_block(Layout::nChw16c);  // the loop's lanes: channels a block

bool depthwise_blocked(const ConvGeometry& g) {
  return g.groups > 1 && g.groups == g.Cin && g.Cin == g.Cout && g.Cin % B == 0;
}

void depthwise_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb) {
  const int64_t CB = g.Cin / B, K = g.KH * g.KW;
  const int64_t in_block = g.H * g.W * B, out_block = g.OH * g.OW * B;  // floats per (n, channel block)
  const float* xs = x.data<float>();
  const float* gys = gy.data<float>();
  gw = empty_cpu(Shape{g.Cout, 1, g.KH, g.KW});  // (C, 1, KH, KW) plain
  if (g.has_bias) gb = empty_cpu(Shape{g.Cout});  // (C)
  float* gws = gw.data<float>();
  float* gbs = g.has_bias ? gb.data<float>() : nullptr;
  // One channel block per task: its KH*KW x 16 sums stay in L1 while every (n, oh, ow) adds to them.
  rows_for(CB, g.N * g.OH * g.OW * K * B, [&](int64_t cb) {
    std::vector<float> acc(static_cast<size_t>(K * B), 0.0f);  // (KH * KW, 16)
    alignas(64) float bias_acc[B] = {};                        // (16,)
    for (int64_t n = 0; n < g.N; ++n) {
      const float* xb = xs + (n * CB + cb) * in_block;   // (H, W, 16)
      const float* gb_ = gys + (n * CB + cb) * out_block;  // (OH, OW, 16)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const float* gv = gb_ + (oh * g.OW + ow) * B;
#pragma omp simd
          for (int64_t c = 0; c < B; ++c) bias_acc[c] += gv[c];
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
              if (iw < 0 || iw >= g.W) continue;
              const float* xv = xb + (ih * g.W + iw) * B;
              float* a = acc.data() + (kh * g.KW + kw) * B;
#pragma omp simd
              for (int64_t c = 0; c < B; ++c) a[c] += xv[c] * gv[c];
            }
          }
        }
    }
    for (int64_t c = 0; c < B; ++c) {
      for (int64_t k = 0; k < K; ++k) gws[(cb * B + c) * K + k] = acc[static_cast<size_t>(k * B + c)];
      if (gbs) gbs[cb * B + c] = bias_acc[c];
    }
  });
}

}  // namespace packrat::cpu
