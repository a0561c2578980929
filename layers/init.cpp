#include "layers/init.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace packrat::init {

namespace {
int64_t receptive_field(const Shape& s) {
  int64_t r = 1;
  for (int64_t i = 2; i < s.rank(); ++i) r *= s[i];
  return r;
}
void check_f32_plain(const Tensor& t, const char* what) {
  PACKRAT_CHECK(t.defined() && t.dtype() == DType::f32 && t.layout() == Layout::Plain,
                "init::{}: needs a plain f32 tensor, got {}", what, t.describe());
}
}  // namespace

int64_t fan_in(const Shape& s) {
  PACKRAT_CHECK(s.rank() >= 2, "init: fan in/out needs a weight of rank >= 2, got shape {}", s.str());
  return s[1] * receptive_field(s);
}

int64_t fan_out(const Shape& s) {
  PACKRAT_CHECK(s.rank() >= 2, "init: fan in/out needs a weight of rank >= 2, got shape {}", s.str());
  return s[0] * receptive_field(s);
}

// Fills t in parallel from the stream's counter on, four values per Philox block (block b of
// the tensor uses counter base + b), then advances the stream past the blocks used.
template <typename Block>
void fill_blocks(Tensor& t, PhiloxStream& rng, Block block) {
  const auto st = rng.state();  // (seed, stream, counter, used words)
  const int64_t n = t.numel(), blocks = (n + 3) / 4;
  float* p = t.data<float>();
  parallel_chunks(blocks, 1 << 12, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint32_t w[4];
      Philox4x32::generate(st[0], st[1], st[2] + static_cast<uint64_t>(b), w);
      float v[4];
      block(w, v);
      for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) p[4 * b + k] = v[k];
    }
  });
  rng.set_state({st[0], st[1], st[2] + static_cast<uint64_t>(blocks), 4});
  t.bump_version();
}

void uniform(Tensor& t, float lo, float hi, PhiloxStream& rng) {
  check_f32_plain(t, "uniform");
  fill_blocks(t, rng, [lo, hi](const uint32_t* w, float* v) {
    for (int k = 0; k < 4; ++k) v[k] = lo + (hi - lo) * Philox4x32::to_uniform(w[k]);
  });
}

void normal(Tensor& t, float mean, float std, PhiloxStream& rng) {
  check_f32_plain(t, "normal");
  fill_blocks(t, rng, [mean, std](const uint32_t* w, float* v) {
    for (int k = 0; k < 4; k += 2) {  // Box-Muller: two normals from two uniforms
      const float u1 = std::max(Philox4x32::to_uniform(w[k]), 1e-7f), u2 = Philox4x32::to_uniform(w[k + 1]);
      const float r = std::sqrt(-2.0f * std::log(u1)), a = 6.28318530717958647f * u2;
      v[k] = mean + std * r * std::cos(a);
      v[k + 1] = mean + std * r * std::sin(a);
    }
  });
}

void constant(Tensor& t, float value) {
  check_f32_plain(t, "constant");
  for (float& v : t.span<float>()) v = value;
  t.bump_version();
}

void default_weight(Tensor& w, PhiloxStream& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in(w.shape())));
  uniform(w, -bound, bound, rng);
}

void default_bias(Tensor& b, int64_t weight_fan_in, PhiloxStream& rng) {
  const float bound = weight_fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(weight_fan_in)) : 0.0f;
  uniform(b, -bound, bound, rng);
}

void kaiming_normal_fan_out(Tensor& w, PhiloxStream& rng) {
  normal(w, 0.0f, std::sqrt(2.0f / static_cast<float>(fan_out(w.shape()))), rng);
}

void kaiming_normal_fan_in(Tensor& w, PhiloxStream& rng) {
  normal(w, 0.0f, std::sqrt(2.0f / static_cast<float>(fan_in(w.shape()))), rng);
}

uint64_t SeedSequence::next() {
  uint64_t z = seed_ + 0x9E3779B97F4A7C15ull * ++count_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace packrat::init
