#pragma once
// Per-index bodies of the CUDA random section: dropout (one thread per Philox counter, its four
// words deciding four elements 64 apart, as core/philox_maps.h maps them for every device),
// masked scaling, the Philox fills of init. CUDA-free, host-tested against the CPU backend bit for
// bit (tests/core/cuda_kernels_random_test.cpp).
#include <cstdint>

#include "core/hd.h"
#include "core/philox.h"
#include "core/philox_maps.h"

namespace packrat::cuda {

// Over c in [0, DropoutPhilox::counters(n)): y = keep ? x * scale : 0 and mask = keep (mask may be
// null) for the elements counter c decides.
struct DropoutBody {
  const float* x;
  float* y;
  uint8_t* mask;
  int64_t n;
  float p, scale;
  uint64_t seed, stream;
  PACKRAT_HD void operator()(int64_t c) const {
    uint32_t w[4];
    Philox4x32::generate(seed, stream, static_cast<uint64_t>(c), w);
    for (int k = 0; k < 4; ++k) {
      const int64_t e = DropoutPhilox::element(static_cast<uint64_t>(c), k);
      if (e >= n) break;  // elements grow with k
      const bool keep = DropoutPhilox::keep(w[k], p);
      y[e] = keep ? x[e] * scale : 0.0f;
      if (mask) mask[e] = keep ? 1 : 0;
    }
  }
};

// out = mask ? grad * scale : 0.
struct MaskScaleBody {
  const float* grad;
  const uint8_t* mask;
  float* out;
  float scale;
  PACKRAT_HD void operator()(int64_t i) const { out[i] = mask[i] ? grad[i] * scale : 0.0f; }
};

// Over blocks b in [0, fill_blocks_for(n)): t[4 b + k] from the words of Philox(seed, stream,
// counter + b): uniform in [a, b) or, when Normal, normal(mean a, std b).
template <bool Normal>
struct FillBody {
  float* t;
  int64_t n;
  float a, b;
  uint64_t seed, stream, counter;
  PACKRAT_HD void operator()(int64_t blk) const {
    uint32_t w[4];
    Philox4x32::generate(seed, stream, counter + static_cast<uint64_t>(blk), w);
    float v[4];
    if constexpr (Normal) {
      normal_block(w, a, b, v);
    } else {
      uniform_block(w, a, b, v);
    }
    for (int64_t k = 0; k < 4 && 4 * blk + k < n; ++k) t[4 * blk + k] = v[k];
  }
};

}  // namespace packrat::cuda
