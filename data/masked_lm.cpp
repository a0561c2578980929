#include "data/masked_lm.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "data/tokens.h"

namespace packrat::data {

int64_t masked_positions(int64_t seq_len) {
  const int64_t bytes = seq_len - 1;
  return std::max<int64_t>(1, std::llround(kMaskedFraction * static_cast<double>(bytes)));
}

void mask_window(const uint8_t* window, int64_t seq_len, uint64_t seed, int64_t epoch, int64_t sample,
                 int64_t* tokens, int64_t* targets) {
  const int64_t bytes = seq_len - 1;  // positions 1 .. T - 1
  tokens[0] = kClsToken;
  targets[0] = kIgnoreTarget;
  for (int64_t j = 1; j < seq_len; ++j) {
    const uint8_t v = window[j - 1];
    tokens[j] = v <= kMaskToken ? '?' : v;  // 0x00 - 0x02 are reserved tokens
    targets[j] = kIgnoreTarget;
  }
  PhiloxStream rng(seed, kMaskedLmStream | static_cast<uint64_t>(sample), static_cast<uint64_t>(epoch) << 32);
  // The first k of a Fisher-Yates shuffle of the byte positions.
  std::vector<int64_t> positions(static_cast<size_t>(bytes));  // (T - 1)
  std::iota(positions.begin(), positions.end(), int64_t{1});
  const int64_t k = masked_positions(seq_len);
  for (int64_t i = 0; i < k; ++i) {
    const auto j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(bytes - i)));
    std::swap(positions[i], positions[j]);
    const int64_t p = positions[i];
    targets[p] = tokens[p];
    const float u = rng.uniform();
    if (u < 0.8f) tokens[p] = kMaskToken;
    else if (u < 0.9f) tokens[p] = kMaskToken + 1 + static_cast<int64_t>(rng.below(255 - kMaskToken));  // 3 .. 255
  }
}

}  // namespace packrat::data
