#pragma once
// What the trainer does differently for a token model: a GPT's logits (N, T, V) against next-byte
// targets (N, T) (data.dataset: text, models/gpt.h), a text encoder's against masked-language-model
// targets (N, T) with -100 where nothing is predicted (train.task: mlm, data/masked_lm.h), figures
// in bits per byte; a text encoder's class logits (N, classes) against labels (N) (text_classes).
#include <cstdint>

#include "core/tensor.h"
#include "experiments/lib/config.h"
#include "experiments/lib/session.h"
#include "experiments/lib/train_loop.h"

namespace packrat {

bool is_text_task(const Config& c);    // data.dataset: text (either train.task)
bool is_masked_lm(const Config& c);    // data.dataset: text, train.task: mlm

// Mean cross-entropy (nats) of a classifier's logits (N, C) against labels (N), or of a token
// model's logits (N, T, V) against targets (N, T): the tokens are flattened to (N*T, V), and
// targets of -100 (data::kIgnoreTarget: masked-language-model positions not chosen) are
// ignored, the mean taken over the others.
Tensor task_loss(const Tensor& logits, const Tensor& labels, float label_smoothing);

// The labels a sample contributes to the loss's mean: 1 (a class), data.seq_len (next-byte
// targets) or data::masked_positions(seq_len) (masked-language-model targets: the same number in
// every sample). Data-parallel steps weigh a rank's gradient by its share of the global batch's.
int64_t labels_per_sample(const Config& c);

// Mean cross-entropy in nats per byte -> bits per byte (nats / ln 2).
double bits_per_byte(double nats_per_byte);

// Random tokens (N, T) i64 in [0, vocab) as `images` and targets (N, T) as `labels`, tagged
// Data, from Philox(seed).
SyntheticBatch synthetic_token_batch(int64_t n, int64_t t, int64_t vocab, uint64_t seed);

// A synthetic batch of n samples of the config's inputs (--benchmark, --memory-report-only,
// --find-max-batch): tokens (N, data.seq_len) for text (with mlm: random bytes masked as the loader
// masks them), tokens and labels (N) for text_classes, images (N, C, H, W) otherwise.
SyntheticBatch synthetic_inputs(const Config& c, const InputSpec& in, int64_t n, uint64_t seed_offset = 0);

}  // namespace packrat
