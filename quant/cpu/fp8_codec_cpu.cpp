// The CPU kernels of the fp8 codec (quant/fp8/fp8_codec.h) over the per-element bodies of
// quant/fp8/fp8_math.h, which the CUDA kernels run too: the same codes and scales, byte for byte.
#include <algorithm>
#include <atomic>
#include <bit>

#include "core/parallel.h"
#include "quant/fp8/fp8_codec.h"

namespace packrat {

namespace {

// Contiguous runs: the loops below are the bodies' strided loops at stride 1, written out so that
// the compiler vectorises them (the conversion is integer selects, the amax a max reduction).
float amax_of(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, fp8_amax_term_bits(x[i]));
  return std::bit_cast<float>(m);
}

template <Fp8Format F>
void encode_run(const float* x, int64_t n, float scale, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = f32_to_fp8<F>(x[i] / scale);
}

template <Fp8Format F>
void decode_run(const uint8_t* codes, int64_t n, float scale, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_to_f32<F>(codes[i]) * scale;
}

}  // namespace

void fp8_encode_host(const float* x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, uint8_t* codes, float* scales) {
  if (g.numel == 0) return;
  with_fp8_format(f, [&](auto fmt) {
    constexpr Fp8Format F = decltype(fmt)::value;
    if (s == Fp8Scale::PerGroup) {
      // A group at a time: its amax, then its codes while it is still in cache.
      rows_for(g.groups(), g.group_size, [&](int64_t group) {
        const int64_t b = group * g.group_size, n = std::min(g.numel, b + g.group_size) - b;
        const float scale = fp8_scale_of(amax_of(x + b, n), F);
        scales[group] = scale;
        encode_run<F>(x + b, n, scale, codes + b);
      });
      return;
    }
    // The tensor's amax: each chunk's, merged on the bits (a non-negative float orders as its bits),
    // so the order the chunks finish in does not matter.
    std::atomic<uint32_t> amax_bits{0};
    parallel_chunks(g.numel, kMinParallelWork, [&](int64_t b, int64_t e) {
      const uint32_t mine = std::bit_cast<uint32_t>(amax_of(x + b, e - b));
      uint32_t seen = amax_bits.load(std::memory_order_relaxed);
      while (mine > seen && !amax_bits.compare_exchange_weak(seen, mine, std::memory_order_relaxed)) {
      }
    });
    const float scale = fp8_scale_of(std::bit_cast<float>(amax_bits.load()), F);
    scales[0] = scale;
    parallel_chunks(g.numel, kMinParallelWork, [&](int64_t b, int64_t e) { encode_run<F>(x + b, e - b, scale, codes + b); });
  });
}

void fp8_decode_host(const uint8_t* codes, const float* scales, Fp8Format f, const Fp8Geometry& g, float* out) {
  if (g.numel == 0) return;
  with_fp8_format(f, [&](auto fmt) {
    constexpr Fp8Format F = decltype(fmt)::value;
    if (g.groups() == 1) {
      parallel_chunks(g.numel, kMinParallelWork, [&](int64_t b, int64_t e) { decode_run<F>(codes + b, e - b, scales[0], out + b); });
      return;
    }
    rows_for(g.groups(), g.group_size, [&](int64_t group) {
      const int64_t b = group * g.group_size, n = std::min(g.numel, b + g.group_size) - b;
      decode_run<F>(codes + b, n, scales[group], out + b);
    });
  });
}

}  // namespace packrat
