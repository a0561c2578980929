#include "experiments/lib/text_task.h"

#include <numbers>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/philox.h"

namespace packrat {

bool is_text_task(const Config& c) { return c.data.dataset == "text"; }

Tensor task_loss(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  if (logits.rank() != 3) return ops::cross_entropy(logits, labels, label_smoothing);
  const int64_t n = logits.dim(0), t = logits.dim(1), v = logits.dim(2);
  PACKRAT_CHECK(labels.numel() == n * t, "loss: token logits are (N, T, V) = ({}, {}, {}) but the targets have {} values",
                n, t, v, labels.numel());
  return ops::cross_entropy(ops::reshape(logits, Shape{n * t, v}), labels.reshape(Shape{n * t}), label_smoothing);
}

double bits_per_byte(double nats_per_byte) { return nats_per_byte / std::numbers::ln2; }

SyntheticBatch synthetic_token_batch(int64_t n, int64_t t, int64_t vocab, uint64_t seed) {
  TagScope tag(MemTag::Data);
  SyntheticBatch b;
  b.images = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N, T) tokens, host
  b.labels = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N, T) targets, host
  PhiloxStream rng(seed, 0x7E47ull);
  for (Tensor* x : {&b.images, &b.labels}) {
    int64_t* p = x->data<int64_t>();
    for (int64_t i = 0; i < x->numel(); ++i) p[i] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab)));
  }
  return b;
}

}  // namespace packrat

namespace packrat {

SyntheticBatch synthetic_inputs(const Config& c, const InputSpec& in, int64_t n, uint64_t seed_offset) {
  const uint64_t seed = c.seed + seed_offset;
  if (is_text_task(c)) return synthetic_token_batch(n, in.width, in.classes, seed);  // width = seq_len
  return synthetic_batch(n, in.channels, in.height, in.width, in.classes, seed);
}

}  // namespace packrat
