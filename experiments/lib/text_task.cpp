#include "experiments/lib/text_task.h"

#include <numbers>
#include <vector>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/philox.h"
#include "data/masked_lm.h"
#include "data/tokens.h"

namespace packrat {

bool is_text_task(const Config& c) { return c.data.dataset == "text"; }

bool is_masked_lm(const Config& c) { return is_text_task(c) && c.train.task == "mlm"; }

Tensor task_loss(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  if (logits.rank() != 3) return ops::cross_entropy(logits, labels, label_smoothing);
  const int64_t n = logits.dim(0), t = logits.dim(1), v = logits.dim(2);
  PACKRAT_CHECK(labels.numel() == n * t, "loss: token logits are (N, T, V) = ({}, {}, {}) but the targets have {} values",
                n, t, v, labels.numel());
  return ops::cross_entropy(ops::reshape(logits, Shape{n * t, v}), labels.reshape(Shape{n * t}), label_smoothing,
                            data::kIgnoreTarget);
}

int64_t labels_per_sample(const Config& c) {
  if (is_masked_lm(c)) return data::masked_positions(c.data.seq_len);
  return is_text_task(c) ? c.data.seq_len : 1;
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

namespace {

// Masked-language-model samples of random bytes: tokens and targets as the loader makes them.
SyntheticBatch synthetic_masked_batch(int64_t n, int64_t t, uint64_t seed) {
  TagScope tag(MemTag::Data);
  SyntheticBatch b;
  b.images = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N, T) tokens, host
  b.labels = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N, T) targets, host
  PhiloxStream rng(seed, 0x7E47ull);
  std::vector<uint8_t> window(static_cast<size_t>(t));  // (T)
  for (int64_t i = 0; i < n; ++i) {
    for (uint8_t& v : window) v = static_cast<uint8_t>(rng.below(256));
    data::mask_window(window.data(), t, seed, 0, i, b.images.data<int64_t>() + i * t, b.labels.data<int64_t>() + i * t);
  }
  return b;
}

// text_classes samples: the class token, then random bytes that are no reserved token (so no
// padding either), and a random label in [0, classes).
SyntheticBatch synthetic_class_batch(int64_t n, int64_t t, int64_t classes, uint64_t seed) {
  TagScope tag(MemTag::Data);
  SyntheticBatch b;
  b.images = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N, T) tokens, host
  b.labels = Tensor::empty(Shape{n}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());     // (N) classes, host
  PhiloxStream rng(seed, 0xC1A55ull);
  int64_t* tokens = b.images.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    tokens[i * t] = data::kClsToken;
    for (int64_t j = 1; j < t; ++j) tokens[i * t + j] = data::kMaskToken + 1 + static_cast<int64_t>(rng.below(253));
    b.labels.data<int64_t>()[i] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(classes)));
  }
  return b;
}

}  // namespace

SyntheticBatch synthetic_inputs(const Config& c, const InputSpec& in, int64_t n, uint64_t seed_offset) {
  const uint64_t seed = c.seed + seed_offset;
  if (is_masked_lm(c)) return synthetic_masked_batch(n, in.width, seed);  // width = seq_len
  if (is_text_task(c)) return synthetic_token_batch(n, in.width, in.classes, seed);
  if (c.data.dataset == "text_classes") return synthetic_class_batch(n, in.width, in.classes, seed);
  return synthetic_batch(n, in.channels, in.height, in.width, in.classes, seed);
}

}  // namespace packrat
