#pragma once
// BERT's masked-language-model inputs (Devlin et al. 2019, section 3.1) from a window of text:
// `data.dataset: text` with `train.task: mlm` (the loader calls it for every sample).
//
//   sequence    kClsToken, then the window's first T - 1 bytes (T = seq_len), as BERT's [CLS]
//               opens its inputs (so position 0 is the class token here as in text_classes). A byte
//               0x00, 0x01 or 0x02 (a reserved token of data/tokens.h) reads as '?'.
//   chosen      k = max(1, round(0.15 (T - 1))) of the T - 1 byte positions, drawn without
//               replacement (the class token never is): 15% of the positions, as BERT's
//               create_pretraining_data chooses them. Of each chosen position, with probability
//               0.8 the token becomes kMaskToken, 0.1 a random byte (uniform over 3..255: never a
//               reserved token) and 0.1 it stays.
//   targets     the original byte at the chosen positions, kIgnoreTarget (-100: cross_entropy's
//               ignore_index, as PyTorch's) everywhere else.
//   randomness  Philox(seed, stream kMaskedLmStream | sample, counter epoch << 32): the masks are a
//               function of (seed, epoch, sample index) only, whatever the batch size, thread or
//               resume point (a resumed run masks exactly as the uninterrupted one).
#include <cstdint>

namespace packrat::data {

constexpr int64_t kIgnoreTarget = -100;
constexpr double kMaskedFraction = 0.15;
constexpr uint64_t kMaskedLmStream = 0x3A5Cull << 48;  // keeps these draws apart from other Philox users

// k above: the positions chosen in a sequence of seq_len tokens (seq_len >= 2).
int64_t masked_positions(int64_t seq_len);

// tokens, targets (T): sample `sample` of epoch `epoch` from the window's first T - 1 bytes.
void mask_window(const uint8_t* window, int64_t seq_len, uint64_t seed, int64_t epoch, int64_t sample,
                 int64_t* tokens, int64_t* targets);

}  // namespace packrat::data
