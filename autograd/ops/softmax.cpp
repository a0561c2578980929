// Softmax over the last dimension. Saves its output (Need::Value), as PyTorch does; backward is
// dx = y * (g - sum(g * y)) per row. exp is the vectorisable one of pointwise_math.h.
#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "autograd/pointwise_math.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "autograd/ops/eltwise_common.h"
#include "core/parallel.h"

namespace packrat::ops {

Tensor softmax(const Tensor& x_any) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x_any.defined(), "softmax {}: the input is undefined", layer);
  PACKRAT_CHECK(x_any.rank() >= 1 && x_any.numel() > 0, "softmax {}: needs a non-empty input, got {}", layer,
                x_any.shape().str());
  PACKRAT_CHECK(x_any.dtype() == DType::f32, "softmax {}: expects an f32 input, got {}", layer,
                dtype_name(x_any.dtype()));
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  Tensor y = Tensor::empty(x.shape());  // (..., D)
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  detail::rows_for(rows, 3 * D, [&](int64_t r) {
    const float* in = src + r * D;
    float* out = dst + r * D;
    float mx = in[0];
    for (int64_t j = 1; j < D; ++j) mx = std::max(mx, in[j]);
    float sum = 0.0f;  // lane-wise partial sums (vectorised reduction)
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < D; ++j) {
      const float e = pwmath::fast_exp(in[j] - mx);
      out[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < D; ++j) out[j] *= inv;
  });
  if (needs_grad({&x_any})) {
    SaveRequest req;
    req.need = Need::Value;
    req.op = "softmax";
    req.name = layer;
    SavedHandle h = save_for_backward(y, req);
    const Layout x_layout = x_any.layout();
    record("softmax", {&x_any}, {&y}, {h}, [x_layout, D](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      const Tensor yv = n.load(0).to_plain();
      const Tensor go = g[0].to_plain();
      Tensor gx = Tensor::empty(yv.shape());  // (..., D)
      const float* yp = yv.data<float>();
      const float* gp = go.data<float>();
      float* out = gx.data<float>();
      detail::rows_for(yv.numel() / D, 2 * D, [&](int64_t r) {
        const float *yr = yp + r * D, *gr = gp + r * D;
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += static_cast<double>(gr[j]) * yr[j];
        const float d = static_cast<float>(dot);
        for (int64_t j = 0; j < D; ++j) out[r * D + j] = yr[j] * (gr[j] - d);
      });
      return {gx.to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
