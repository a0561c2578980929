#pragma once
// The NHWC tensors of the staged quantize's and the decode's host tests (nhwc_tile_test.cpp,
// nhwc_decode_test.cpp): shapes and groupings, random values, the NHWC buffer of a plain tensor.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "quant/group_quant.h"

namespace packrat::nhwc_cases {

struct Case {
  int64_t n, c, h, w;
  int64_t group_size;
  Grouping grouping = Grouping::PerPlane;
  std::string name() const {
    return fmt::format("({}, {}, {}, {}) {} groups of {}", n, c, h, w, grouping_name(grouping), group_size);
  }
};
// Per plane: planes of 99 (4 groups of 25 at G = 32), 1024 (4 groups of 256), 64 (4 planes to a
// group of 256), 49 (groups of 49 at G = 64), 9 (7 planes to a group of 63, a short last group a
// sample). Per sample: groups within a channel (planes of 1024), of 4 channels (planes of 64), across
// channels' edges (planes of 49, G = 64), with a short last group a sample (297 values, G = 100).
// Flat: groups across samples' edges.
inline const Case kCases[] = {{4, 3, 9, 11, 32},
                       {2, 8, 32, 32, 256},
                       {3, 12, 8, 8, 256},
                       {2, 20, 7, 7, 64},
                       {2, 32, 3, 3, 64},
                       {2, 8, 32, 32, 256, Grouping::PerSample},
                       {3, 12, 8, 8, 256, Grouping::PerSample},
                       {2, 20, 7, 7, 64, Grouping::PerSample},
                       {3, 3, 9, 11, 100, Grouping::PerSample},
                       {3, 5, 7, 9, 128, Grouping::Flat}};
inline const QuantNoise kNoise{0x71E5ull, quant_stream(4, 2)};

inline std::vector<float> random_values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 6.0f * s.uniform();
  return v;
}

// The NHWC buffer of a plain (N, C, P) tensor.
inline std::vector<float> to_nhwc(const std::vector<float>& plain, int64_t n, int64_t c, int64_t p) {
  std::vector<float> out(plain.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < p; ++i) out[static_cast<size_t>((s * p + i) * c + k)] = plain[static_cast<size_t>((s * c + k) * p + i)];
  return out;
}

inline GroupGeometry geometry_of(const Case& k, int bits) {
  GroupQuantConfig c;
  c.bits = bits;
  c.group_size = k.group_size;
  c.grouping = k.grouping;
  return group_geometry(k.n * k.c * k.h * k.w, k.n, c, k.h * k.w);
}

}  // namespace packrat::nhwc_cases
