// CpuBackend: dropout masks from Philox, masked scaling, Philox fills for initialisation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/dropout_words.h"
#include "core/cpu/loops.h"
#include "core/philox.h"
#include "core/philox_maps.h"

namespace packrat::cpu {

namespace {

constexpr int64_t kLanes = DropoutPhilox::kLanes;  // Philox counters per dropout block
constexpr int64_t kBlock = DropoutPhilox::kBlock;  // elements per dropout block (the mapping: core/philox_maps.h)

// mask[i] = 1 where element i is kept; y[i] = x[i] * scale there, 0 elsewhere. mask may be null.
// T: float, or bf16_t (x read as its f32 value, y rounded as a conversion rounds it).
template <typename T>
void dropout_loop(const T* x, T* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed, uint64_t stream) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_chunks(blocks, 16, [&](int64_t bb, int64_t be) {
    // Locals and restrict pointers: loads through the closure would block vectorisation.
    const T* __restrict xs = x;
    T* __restrict ys = y;
    uint8_t* __restrict ms = mask;
    const float pl = p, sl = scale;
    alignas(64) uint32_t w[4][kLanes];
    for (int64_t b = bb; b < be; ++b) {
      dropout_block_words(seed, stream, static_cast<uint64_t>(b * kLanes), w);
      const int64_t base = b * kBlock;
      const int64_t count = std::min<int64_t>(kBlock, n - base);
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t off = base + k * kLanes;
        const int64_t len = std::min<int64_t>(kLanes, count - k * kLanes);
        const uint32_t* wk = w[k];
        for (int64_t j = 0; j < len; ++j)
          ys[off + j] = from_f32<T>(DropoutPhilox::keep(wk[j], pl) ? to_f32(xs[off + j]) * sl : 0.0f);
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
  Tensor y = Tensor::empty_like(x);
  with_f32_or_bf16_data(x, "dropout", [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    if (mask) *mask = empty_cpu(x.shape(), DType::u8, x.layout());  // like x, 0/1
    dropout_loop(src, static_cast<T*>(y.raw()), mask ? mask->data<uint8_t>() : nullptr, x.numel(), p, scale, seed,
                 stream);
  });
  return y;
}

Tensor CpuBackend::mask_scale(const Tensor& grad, const Tensor& mask, float scale) {
  mask.check_dtype(DType::u8, "mask_scale");
  PACKRAT_CHECK(grad.numel() == mask.numel() && grad.layout() == mask.layout(), "{}: gradient {} and mask {}",
                op_where("mask_scale"), grad.describe(), mask.describe());
  Tensor gx = Tensor::empty_like(grad);
  with_f32_or_bf16_data(grad, "mask_scale", [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    T* dst = static_cast<T*>(gx.raw());
    const uint8_t* __restrict keep = mask.data<uint8_t>();
    parallel_chunks(gx.numel(), kBinaryGrain, [&](int64_t s, int64_t e) {
      const uint8_t* __restrict k = keep;
      const T* __restrict in = src;
      T* __restrict out = dst;
      const float sc = scale;
      for (int64_t i = s; i < e; ++i) out[i] = from_f32<T>(k[i] ? to_f32(in[i]) * sc : 0.0f);
    });
  });
  return gx;
}

bool CpuBackend::dropout_reads(DType dtype) const { return dtype == DType::f32 || dtype == DType::bf16; }

int64_t CpuBackend::fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) {
  return fill_blocks(t, seed, stream, counter, [lo, hi](const uint32_t* w, float* v) { uniform_block(w, lo, hi, v); });
}

int64_t CpuBackend::fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) {
  return fill_blocks(t, seed, stream, counter,
                     [mean, std](const uint32_t* w, float* v) { normal_block(w, mean, std, v); });
}

}  // namespace packrat::cpu
