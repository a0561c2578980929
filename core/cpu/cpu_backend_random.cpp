// CpuBackend: dropout masks from Philox, masked scaling, Philox fills for initialisation.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/philox.h"
#include "core/philox_maps.h"

namespace packrat::cpu {

namespace {

constexpr int64_t kLanes = DropoutPhilox::kLanes;  // Philox counters per dropout block
constexpr int64_t kBlock = DropoutPhilox::kBlock;  // elements per dropout block (the mapping: core/philox_maps.h)

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
void dropout_loop(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
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
          ys[off + j] = DropoutPhilox::keep(wk[j], pl) ? xs[off + j] * sl : 0.0f;
        if (ms)
          for (int64_t j = 0; j < len; ++j) ms[off + j] = DropoutPhilox::keep(wk[j], pl) ? 1 : 0;
      }
    }
  });
}

// Fills t in parallel, four values per Philox block (block b uses counter + b); returns the
// blocks used.
template <typename Block>
int64_t fill_blocks(Tensor& t, uint64_t seed, uint64_t stream, uint64_t counter, Block block) {
  PACKRAT_CHECK(t.dtype() == DType::f32 && t.layout() == Layout::Plain, "init: needs a plain f32 tensor, got {}",
                t.describe());
  const int64_t n = t.numel(), blocks = fill_blocks_for(n);
  float* p = t.data<float>();
  parallel_chunks(blocks, 1 << 12, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint32_t w[4];
      Philox4x32::generate(seed, stream, counter + static_cast<uint64_t>(b), w);
      float v[4];
      block(w, v);
      for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) p[4 * b + k] = v[k];
    }
  });
  t.bump_version();
  return blocks;
}

}  // namespace

Tensor CpuBackend::dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream,
                                   Tensor* mask) {
  x.check_dtype(DType::f32, "dropout");
  Tensor y = Tensor::empty_like(x);
  if (mask) *mask = empty_cpu(x.shape(), DType::u8, x.layout());  // like x, 0/1
  dropout_loop(x.data<float>(), y.data<float>(), mask ? mask->data<uint8_t>() : nullptr, x.numel(), p, scale, seed,
               stream);
  return y;
}

Tensor CpuBackend::mask_scale(const Tensor& grad, const Tensor& mask, float scale) {
  grad.check_dtype(DType::f32, "mask_scale");
  mask.check_dtype(DType::u8, "mask_scale");
  PACKRAT_CHECK(grad.numel() == mask.numel() && grad.layout() == mask.layout(), "{}: gradient {} and mask {}",
                op_where("mask_scale"), grad.describe(), mask.describe());
  Tensor gx = Tensor::empty_like(grad);
  const uint8_t* __restrict keep = mask.data<uint8_t>();
  const float* __restrict src = grad.data<float>();
  float* __restrict dst = gx.data<float>();
  parallel_chunks(gx.numel(), kBinaryGrain, [&](int64_t s, int64_t e) {
    const uint8_t* __restrict k = keep;
    const float* __restrict in = src;
    float* __restrict out = dst;
    const float sc = scale;
    for (int64_t i = s; i < e; ++i) out[i] = k[i] ? in[i] * sc : 0.0f;
  });
  return gx;
}

int64_t CpuBackend::fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) {
  return fill_blocks(t, seed, stream, counter, [lo, hi](const uint32_t* w, float* v) { uniform_block(w, lo, hi, v); });
}

int64_t CpuBackend::fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) {
  return fill_blocks(t, seed, stream, counter,
                     [mean, std](const uint32_t* w, float* v) { normal_block(w, mean, std, v); });
}

}  // namespace packrat::cpu
