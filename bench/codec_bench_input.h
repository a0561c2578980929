#pragma once
// The tensor the CPU codec benchmarks quantize (group_quant_bench.cpp, mixed_quant_bench.cpp):
// an activation-sized f32 (64, 64, 32, 32), uniform in [-1, 3), the same bits in every run.
#include <cstdint>

#include "core/philox.h"
#include "core/tensor.h"

namespace packrat::codec_bench {

constexpr int64_t kN = 64, kC = 64, kH = 32, kW = 32;
constexpr int64_t kNumel = kN * kC * kH * kW;

inline Tensor make_input() {
  Tensor t = Tensor::empty({kN, kC, kH, kW});  // (N, C, H, W)
  float* p = t.data<float>();
  PhiloxStream s(7, 0);
  for (int64_t i = 0; i < kNumel; ++i) p[i] = s.uniform() * 4.0f - 1.0f;
  return t;
}

}  // namespace packrat::codec_bench
