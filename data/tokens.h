#pragma once
// The reserved byte tokens of the text encoders (models/bert.h) and the datasets that feed them
// (data.dataset: text_classes; text with train.task: mlm). Tokens are bytes (vocabulary 256); these
// three values never occur in the text the datasets read (a file holding a NUL byte is skipped
// as binary, and the datasets replace a 0x01 / 0x02 byte of a record by '?').
#include <cstdint>

namespace packrat::data {

constexpr uint8_t kPadToken = 0;   // after a sequence's last token: attention ignores it (key padding)
constexpr uint8_t kClsToken = 1;   // first token of a text_classes sequence: the classifier reads its state
constexpr uint8_t kMaskToken = 2;  // a masked position of masked-language-model pretraining

}  // namespace packrat::data
