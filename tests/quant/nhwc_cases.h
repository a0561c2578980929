#pragma once
// The NHWC tensors of the NHWC codec's tests (the staged and the quads quantize, the decode: on the
// host, nhwc_tile_test.cpp, quad_quantize_test.cpp, nhwc_decode_test.cpp; on a GPU,
// group_quant_device_test.cpp): shapes and groupings, random and hostile values, the NHWC buffer
// of a plain tensor.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "quant/group/group_quant.h"

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
// Per plane: planes of 1024 (4 groups each, 2 quads a run), of 64 (4 planes a group), of 256 in
// groups of 64 (2 lanes a group), of 96 in 3 groups of 32. Per sample: within a channel, of 4
// channels, of 16 channels (planes of 16, 8 quads a run over a sample), a group over a whole
// sample (G = 1024 > 512: 32 lanes a group, two blocks each). Flat: a run a quad plane, groups
// across samples.
inline const Case kQuadCases[] = {{2, 8, 32, 32, 256},
                                  {3, 12, 8, 8, 256},
                                  {2, 16, 16, 16, 64},
                                  {2, 4, 8, 12, 32},
                                  {2, 8, 32, 32, 256, Grouping::PerSample},
                                  {3, 12, 8, 8, 256, Grouping::PerSample},
                                  {2, 32, 4, 4, 256, Grouping::PerSample},
                                  {2, 8, 8, 8, 1024, Grouping::PerSample},
                                  {2, 4, 24, 24, 128, Grouping::Flat}};

inline const QuantNoise kNoise{0x71E5ull, quant_stream(4, 2)};

inline std::vector<float> random_values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 6.0f * s.uniform();
  return v;
}

// Values in [-3, 3) with, group by group, the cases a range scan must settle like the CPU's: a
// ReLU's output (zero minimum, some zeros negative), all zeros of mixed signs, a NaN first value,
// a NaN inside, a non-positive group (zero maximum).
inline std::vector<float> hostile_values(int64_t numel, int64_t group, uint64_t seed) {
  std::vector<float> x = random_values(numel, seed);
  for (int64_t i = 0; i < numel; ++i) {
    float& e = x[static_cast<size_t>(i)];
    switch ((i / group) % 7) {
      case 1:
        e = e > 0.0f ? e : (i % 3 == 0 ? -0.0f : 0.0f);
        break;
      case 2:
        e = i % 2 ? -0.0f : 0.0f;
        break;
      case 3:
        if (i % group == 0) e = std::nanf("");
        break;
      case 4:
        if (i % group == 5) e = std::nanf("");
        break;
      case 5:
        e = e < 0.0f ? e : (i % 5 == 0 ? 0.0f : -0.0f);
        break;
      default:
        break;
    }
  }
  return x;
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
