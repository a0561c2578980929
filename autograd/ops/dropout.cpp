// Inverted dropout. The uniform of element i is a pure function of (seed, stream, i), so any
// element's decision can be recomputed on its own: elements go in blocks of 256, and element
// i = 256 b + r takes word r / 64 of Philox(seed, stream, counter 64 b + r % 64). (This order lets
// 64 Philox counters run side by side in vector lanes and each word fill 64 consecutive
// elements.) Kept where the uniform is >= p. The keep mask is saved as Need::Mask (u8 0/1, as
// PyTorch's bool mask).
#include <string>

#include "autograd/ops.h"
#include "autograd/ops/eltwise_common.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "core/parallel.h"
#include "core/philox.h"

namespace packrat::ops {

namespace {

constexpr int64_t kLanes = 64;          // Philox counters per block
constexpr int64_t kBlock = 4 * kLanes;  // elements per block

// One Philox-4x32-10 round (Philox4x32::generate, unrolled by hand so the lane loop vectorises).
#define PACKRAT_PHILOX_ROUND(R)                                                            \
  {                                                                                        \
    const uint64_t p0 = static_cast<uint64_t>(Philox4x32::kMul0) * c0;                     \
    const uint64_t p1 = static_cast<uint64_t>(Philox4x32::kMul1) * c2;                     \
    const uint32_t k0 = key0 + (R) * Philox4x32::kWeyl0, k1 = key1 + (R) * Philox4x32::kWeyl1; \
    c0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;                                        \
    c1 = static_cast<uint32_t>(p1);                                                        \
    c2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;                                        \
    c3 = static_cast<uint32_t>(p0);                                                        \
  }

// The four words of counters [counter0, counter0 + 64), word-major: w[k][j]; the same numbers
// as Philox4x32::generate (checked by the tests).
void philox_block(uint64_t seed, uint64_t stream, uint64_t counter0, uint32_t (&w)[4][kLanes]) {
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t s0 = static_cast<uint32_t>(stream), s1 = static_cast<uint32_t>(stream >> 32);
  const uint32_t hi = static_cast<uint32_t>(counter0 >> 32), lo0 = static_cast<uint32_t>(counter0);
  // counter0 is a multiple of 64, so counter0 + j never carries into the high word.
  for (uint32_t j = 0; j < kLanes; ++j) {
    uint32_t c0 = lo0 + j, c1 = hi, c2 = s0, c3 = s1;
    PACKRAT_PHILOX_ROUND(0) PACKRAT_PHILOX_ROUND(1) PACKRAT_PHILOX_ROUND(2) PACKRAT_PHILOX_ROUND(3)
    PACKRAT_PHILOX_ROUND(4) PACKRAT_PHILOX_ROUND(5) PACKRAT_PHILOX_ROUND(6) PACKRAT_PHILOX_ROUND(7)
    PACKRAT_PHILOX_ROUND(8) PACKRAT_PHILOX_ROUND(9)
    w[0][j] = c0;
    w[1][j] = c1;
    w[2][j] = c2;
    w[3][j] = c3;
  }
}
#undef PACKRAT_PHILOX_ROUND

// mask[i] = 1 where element i is kept; y[i] = x[i] * scale there, 0 elsewhere. mask may be null.
void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                     uint64_t stream) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_chunks(blocks, 16, [&](int64_t bb, int64_t be) {
    // Locals and restrict pointers: loads through the closure would block vectorisation.
    const float* __restrict xs = x;
    float* __restrict ys = y;
    uint8_t* __restrict ms = mask;
    const float pl = p, sl = scale;
    alignas(64) uint32_t w[4][kLanes];
    for (int64_t b = bb; b < be; ++b) {
      philox_block(seed, stream, static_cast<uint64_t>(b * kLanes), w);
      const int64_t base = b * kBlock;
      const int64_t count = std::min<int64_t>(kBlock, n - base);
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t off = base + k * kLanes;
        const int64_t len = std::min<int64_t>(kLanes, count - k * kLanes);
        const uint32_t* wk = w[k];
        for (int64_t j = 0; j < len; ++j)
          ys[off + j] = Philox4x32::to_uniform(wk[j]) >= pl ? xs[off + j] * sl : 0.0f;
        if (ms)
          for (int64_t j = 0; j < len; ++j) ms[off + j] = Philox4x32::to_uniform(wk[j]) >= pl ? 1 : 0;
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
  const bool grad = needs_grad({&x});
  Tensor y = Tensor::empty_like(x);
  Tensor mask = grad ? Tensor::empty(x.shape(), DType::u8, x.layout()) : Tensor();  // like x, 0/1
  dropout_forward(x.data<float>(), y.data<float>(), grad ? mask.data<uint8_t>() : nullptr, x.numel(), p, scale,
                  seed, stream);
  if (grad) {
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
        const uint8_t* __restrict k = keep;
        const float* __restrict in = src;
        float* __restrict out = dst;
        const float sc = scale;
        for (int64_t i = s; i < e; ++i) out[i] = k[i] ? in[i] * sc : 0.0f;
      });
      return {gx.to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
