// Inverted dropout. Element i of the buffer (as it lies) is kept when the uniform drawn from
// Philox(seed, stream, counter i / 4, word i % 4) is >= p, so any element's decision can be
// recomputed on its own. The keep mask is saved as Need::Mask (u8 0/1, as PyTorch's bool mask).
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "core/parallel.h"
#include "core/philox.h"

namespace packrat::ops {

namespace {

// mask[i] = 1 where element i is kept; y[i] = mask[i] ? x[i] * scale : 0.
void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                     uint64_t stream) {
  const int64_t groups = (n + 3) / 4;  // one Philox call per 4 elements
  parallel_chunks(groups, 1 << 12, [&](int64_t gb, int64_t ge) {
    for (int64_t g = gb; g < ge; ++g) {
      uint32_t words[4];
      Philox4x32::generate(seed, stream, static_cast<uint64_t>(g), words);
      const int64_t base = g * 4;
      const int64_t count = std::min<int64_t>(4, n - base);
      for (int64_t k = 0; k < count; ++k) {
        const uint8_t keep = Philox4x32::to_uniform(words[k]) >= p ? 1 : 0;
        mask[base + k] = keep;
        y[base + k] = keep ? x[base + k] * scale : 0.0f;
      }
    }
  });
}

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "dropout {}: the input is undefined", layer);
  PACKRAT_CHECK(p >= 0.0f && p <= 1.0f, "dropout {}: probability must be in [0, 1], got {}", layer, p);
  if (!training || p == 0.0f) return x;
  PACKRAT_CHECK(x.dtype() == DType::f32, "dropout {}: expects an f32 input, got {}", layer, dtype_name(x.dtype()));

  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // p = 1 drops everything, as PyTorch
  Tensor y = Tensor::empty_like(x);
  Tensor mask = Tensor::empty(x.shape(), DType::u8, x.layout());  // same shape and layout as x, 0/1
  dropout_forward(x.data<float>(), y.data<float>(), mask.data<uint8_t>(), x.numel(), p, scale, seed, stream);
  if (needs_grad({&x})) {
    SaveRequest req;
    req.need = Need::Mask;
    req.op = "dropout";
    req.name = layer;
    SavedHandle h = save_for_backward(mask, req);
    const Layout x_layout = x.layout();
    record("dropout", {&x}, {&y}, {h}, [scale, x_layout](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      const Tensor m = n.load(0);
      const Tensor go = g[0].to_layout(m.layout());
      go.check_dtype(DType::f32, "dropout backward");
      Tensor gx = Tensor::empty_like(go);
      const uint8_t* __restrict keep = m.data<uint8_t>();
      const float* __restrict src = go.data<float>();
      float* __restrict dst = gx.data<float>();
      parallel_chunks(gx.numel(), 1 << 15, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) dst[i] = keep[i] ? src[i] * scale : 0.0f;
      });
      return {gx.to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
