#include "layers/init.h"

#include <algorithm>
#include <cmath>

#include "core/backend.h"

namespace packrat::init {

namespace {
int64_t receptive_field(const Shape& s) {
  int64_t r = 1;
  for (int64_t i = 2; i < s.rank(); ++i) r *= s[i];
  return r;
}
void check_f32(const Tensor& t, const char* what) {
  PACKRAT_CHECK(t.defined() && t.dtype() == DType::f32, "init::{}: needs an f32 tensor, got {}", what, t.describe());
}

// fill(p) on t's elements in their logical (plain) order, whatever t's layout: a tensor in another
// layout (a GPU's KRSC convolution weight) takes the values its plain twin would, through a plain
// Workspace scratch reordered into it.
template <typename Fill>
void fill_in_plain_order(Tensor& t, Fill fill) {
  if (t.layout() == Layout::Plain) {
    fill(t);
    return;
  }
  const TagScope scratch(MemTag::Workspace);
  Tensor plain = Tensor::empty(t.shape(), DType::f32, Layout::Plain, MemTag::Workspace, t.device());
  fill(plain);
  const Tensor reordered = plain.to_layout(t.layout());
  backend_of(t).copy(reordered, t);
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

void uniform(Tensor& t, float lo, float hi, PhiloxStream& rng) {
  check_f32(t, "uniform");
  // Block b of the tensor takes counter + b; the stream then moves past the blocks used.
  const auto st = rng.state();  // (seed, stream, counter, used words)
  int64_t blocks = 0;
  fill_in_plain_order(t, [&](Tensor& p) { blocks = backend_of(p).fill_uniform(p, lo, hi, st[0], st[1], st[2]); });
  rng.set_state({st[0], st[1], st[2] + static_cast<uint64_t>(blocks), 4});
}

void normal(Tensor& t, float mean, float std, PhiloxStream& rng) {
  check_f32(t, "normal");
  const auto st = rng.state();  // (seed, stream, counter, used words)
  int64_t blocks = 0;
  fill_in_plain_order(t, [&](Tensor& p) { blocks = backend_of(p).fill_normal(p, mean, std, st[0], st[1], st[2]); });
  rng.set_state({st[0], st[1], st[2] + static_cast<uint64_t>(blocks), 4});
}

void constant(Tensor& t, float value) {
  check_f32(t, "constant");
  backend_of(t).fill(t, value);  // the same value everywhere: any layout
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
