#pragma once
// The per-group quantizer configurations the device tests sweep (the CUDA kernels' warp schedule
// replayed on the host in group_quant_warp_test.cpp, the kernels themselves in
// group_quant_device_test.cpp): every width, both roundings and metadata types, groups of 7, 32,
// 33, 64, 256 and 1000 (one lane to a warp per group) per sample and flat over spans of 1013 (no
// group on an 8- or 128-element boundary after the first), groups of 2500 over spans of 5013 (a
// warp's chunks of 1024 in turn), and per-plane groups of 49 (planes of 7 x 7 grouped whole, of
// 14 x 14 cut in four).
#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "quant/group/group_quant.h"

namespace packrat::testing {

// n values in [-3, 5), a constant run first (a constant group when G <= 40) and signed zeros.
inline std::vector<float> group_values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 8.0f * s.uniform();
  for (int64_t i = 0; i < n && i < 40; ++i) v[static_cast<size_t>(i)] = 0.75f;
  for (int64_t i = 50; i < n && i < 60; ++i) v[static_cast<size_t>(i)] = i % 2 ? 0.0f : -0.0f;
  return v;
}

struct GroupCase {
  GroupQuantConfig c;
  int64_t samples, span, plane = 0;  // plane: per-plane grouping's channel plane
  std::string name() const {
    return "bits " + std::to_string(c.bits) + " G " + std::to_string(c.group_size) + " " +
           std::string(rounding_name(c.rounding)) + " " + std::string(meta_name(c.meta)) + " " +
           std::string(grouping_name(c.grouping)) + " " + std::to_string(samples) + "x" + std::to_string(span) +
           (plane ? " plane " + std::to_string(plane) : "");
  }
};

inline std::vector<GroupCase> group_cases() {
  std::vector<GroupCase> out;
  for (int bits : {1, 2, 3, 4, 8})
    for (int64_t G : {int64_t{7}, int64_t{32}, int64_t{33}, int64_t{64}, int64_t{256}, int64_t{1000}, int64_t{2500}})
      for (Rounding r : {Rounding::Stochastic, Rounding::Nearest})
        for (MetaType m : {MetaType::BF16, MetaType::F32}) {
          GroupCase k;
          k.c.bits = bits;
          k.c.group_size = G;
          k.c.rounding = r;
          k.c.meta = m;
          k.c.grouping = G == 33 ? Grouping::Flat : Grouping::PerSample;
          k.samples = 3;
          k.span = G > 1013 ? 5013 : 1013;  // not a multiple of 8, of 128 or of any G
          out.push_back(k);
          if (G != 7) continue;
          k.c.grouping = Grouping::PerPlane;  // planes of 7 x 7 and 14 x 14: groups of 49, one or four a plane
          k.c.group_size = 64;
          for (int64_t plane : {49, 196}) {
            k.plane = plane;
            k.span = 5 * plane;
            out.push_back(k);
          }
        }
  return out;
}

}  // namespace packrat::testing
